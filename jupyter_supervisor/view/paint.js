// The painting of a chart's canvas, from its scene (chart.js's draw computes it): the frame
// that maps data to pixels and back, the axes, the curves (the raw line faint behind the
// smoothed one, the min/max band of merged points), and the markers of non-finite values. A
// module of the front end (widget.py joins its files); chart.js is its only user.

// The plot area inside the canvas, in CSS pixels.
export const PAD = {left: 58, right: 10, top: 8, bottom: 24};

// Data to pixels and back, for a scene drawn `width` x `height` pixels.
export function frameOf(s, width, height) {
  const w = width - PAD.left - PAD.right, h = height - PAD.top - PAD.bottom;
  const [x0, x1] = s.x, [y0, y1] = s.y;
  const yData = (p) => y0 + ((PAD.top + h - p) / h) * (y1 - y0);
  return {
    w, h,
    px: (x) => PAD.left + ((x - x0) / (x1 - x0)) * w,
    py: (y) => PAD.top + h - ((y - y0) / (y1 - y0)) * h,
    xData: (p) => x0 + ((p - PAD.left) / w) * (x1 - x0),
    yValue: (p) => (s.log ? Math.pow(10, yData(p)) : yData(p)),
  };
}

export function paintAxes(ctx, s, f, theme) {
  ctx.font = theme.font;
  ctx.strokeStyle = theme.grid;
  ctx.fillStyle = theme.text;
  ctx.lineWidth = 1;
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  s.xTicks.forEach((t, i) => {
    const x = f.px(t);
    ctx.beginPath(); ctx.moveTo(x, PAD.top); ctx.lineTo(x, PAD.top + f.h); ctx.stroke();
    ctx.fillText(s.xLabels[i], x, PAD.top + f.h + 4);
  });
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  s.yTicks.forEach((t, i) => {
    const y = f.py(s.toY(t));
    ctx.beginPath(); ctx.moveTo(PAD.left, y); ctx.lineTo(PAD.left + f.w, y); ctx.stroke();
    ctx.fillText(s.yLabels[i], PAD.left - 4, y);
  });
  ctx.strokeStyle = theme.frame;
  ctx.strokeRect(PAD.left, PAD.top, f.w, f.h);
}

// The raw line faint behind the smoothed one; a lone point as a dot. A line breaks at a value
// the scale cannot place (non-finite, or at most 0 on a log axis).
export function paintCurves(ctx, s, f, smoothing) {
  for (const l of s.lines) {
    if (l.series.mins) paintBand(ctx, s, f, l);
    const path = (values, alpha, widthPx) => {
      ctx.globalAlpha = alpha;
      ctx.strokeStyle = l.colour;
      ctx.fillStyle = l.colour;
      ctx.lineWidth = widthPx;
      if (values.length === 1) {
        const y = s.toY(values[0]);
        if (Number.isFinite(y)) {
          ctx.beginPath(); ctx.arc(f.px(l.xs[0]), f.py(y), 3, 0, 2 * Math.PI); ctx.fill();
        }
        return;
      }
      ctx.beginPath();
      let pen = false;
      values.forEach((v, i) => {
        const y = s.toY(v);
        if (!Number.isFinite(y)) { pen = false; return; }
        if (pen) ctx.lineTo(f.px(l.xs[i]), f.py(y)); else ctx.moveTo(f.px(l.xs[i]), f.py(y));
        pen = true;
      });
      ctx.stroke();
    };
    if (smoothing) path(l.series.values, 0.25, 1);
    path(l.smoothed, 1, 1.5);
  }
}

// The min/max band of merged points, faint in the run's colour; it breaks where the scale
// cannot place a bound.
function paintBand(ctx, s, f, l) {
  const {mins, maxs} = l.series;
  ctx.globalAlpha = 0.2;
  ctx.fillStyle = l.colour;
  let stretch = [];
  const fill = () => {
    if (stretch.length > 1) {
      ctx.beginPath();
      stretch.forEach(([x, lo], k) => (k ? ctx.lineTo(x, lo) : ctx.moveTo(x, lo)));
      for (let k = stretch.length - 1; k >= 0; k--) ctx.lineTo(stretch[k][0], stretch[k][2]);
      ctx.closePath();
      ctx.fill();
    }
    stretch = [];
  };
  mins.forEach((lo, i) => {
    const a = s.toY(lo), b = s.toY(maxs[i]);
    if (Number.isFinite(a) && Number.isFinite(b)) stretch.push([f.px(l.xs[i]), f.py(a), f.py(b)]);
    else fill();
  });
  fill();
}

// Non-finite values as markers in the run's colour: NaN a cross at the height of the value
// before it (as TensorBoard places it), +inf a triangle at the top edge, -inf one at the
// bottom edge.
export function paintNonFinite(ctx, s, f, theme) {
  const top = PAD.top, bottom = PAD.top + f.h;
  const clamp = (y) => Math.min(bottom - 5, Math.max(top + 5, y));
  for (const l of s.lines) {
    let before = null;  // the height of the last finite value (one a log axis leaves out: 0)
    l.series.values.forEach((v, i) => {
      if (Number.isFinite(v)) {
        const y = s.toY(v);
        before = Number.isFinite(y) ? f.py(y) : bottom;
        return;
      }
      const x = l.xs[i];
      if (x < s.x[0] || x > s.x[1]) return;
      const px = f.px(x);
      ctx.fillStyle = ctx.strokeStyle = l.colour;
      if (Number.isNaN(v)) {
        const y = clamp(before === null ? (top + bottom) / 2 : before);
        for (const [colour, width] of [[theme.background, 4], [l.colour, 2]]) {
          ctx.strokeStyle = colour;
          ctx.lineWidth = width;
          ctx.beginPath();
          ctx.moveTo(px - 4, y - 4); ctx.lineTo(px + 4, y + 4);
          ctx.moveTo(px - 4, y + 4); ctx.lineTo(px + 4, y - 4);
          ctx.stroke();
        }
      } else {
        const [tip, base] = v > 0 ? [top + 1, top + 9] : [bottom - 1, bottom - 9];
        ctx.beginPath();
        ctx.moveTo(px, tip); ctx.lineTo(px - 5, base); ctx.lineTo(px + 5, base); ctx.closePath();
        ctx.fill();
        ctx.strokeStyle = theme.background;
        ctx.lineWidth = 1;
        ctx.stroke();
      }
    });
  }
}

// The index of the x nearest to `target`.
export function nearest(xs, target) {
  let best = 0;
  for (let i = 1; i < xs.length; i++) {
    if (Math.abs(xs[i] - target) < Math.abs(xs[best] - target)) best = i;
  }
  return best;
}
