// The theme of jupyter_supervisor's panel and comparison chart: the colours the charts draw
// with and the tones the header uses, read from the page where the view is (JupyterLab's
// variables, else the element's own colours), each text colour picked to read on the view's
// background (WCAG contrast); and when to read them again. The rules themselves are theme.css.

// The curves' palette (matplotlib's tab10) until the kernel's state names its own.
const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                 "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
// WCAG's threshold for normal text.
const MIN_CONTRAST = 4.5;
// Each status's tone, as the theme's colours of that name (readable() picks the first that
// reads on the background).
const TONES = {
  success: ["--jp-success-color0", "--jp-success-color1", "--jp-success-color2"],
  warn: ["--jp-warn-color0", "--jp-warn-color1", "--jp-warn-color2"],
  brand: ["--jp-brand-color0", "--jp-brand-color1", "--jp-brand-color2"],
  error: ["--jp-error-color0", "--jp-error-color1", "--jp-error-color2"],
  muted: ["--jp-ui-font-color2", "--jp-ui-font-color1"],
};

// [r, g, b, a] (0-255, alpha 0-1) of any CSS colour, as the canvas parses it; null if invalid.
const colourProbe = document.createElement("canvas").getContext("2d");
function rgba(css) {
  colourProbe.fillStyle = "#010203";
  colourProbe.fillStyle = css;
  const text = colourProbe.fillStyle;
  if (text === "#010203" && css.trim().toLowerCase() !== "#010203") return null;
  if (text.startsWith("#")) {
    return [1, 3, 5].map((i) => parseInt(text.slice(i, i + 2), 16)).concat([1]);
  }
  const parts = text.slice(text.indexOf("(") + 1, -1).split(",").map(Number);
  return parts.length === 4 ? parts : parts.concat([1]);
}

// `top` (with its alpha) composited over the opaque `under`.
function over(top, under) {
  const a = top[3];
  return [0, 1, 2].map((i) => top[i] * a + under[i] * (1 - a)).concat([1]);
}

function luminance([r, g, b]) {
  const lin = (c) => {
    c /= 255;
    return c <= 0.03928 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4);
  };
  return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
}

// The WCAG contrast ratio of a text colour (maybe translucent) on an opaque background.
function contrast(text, background) {
  const [a, b] = [luminance(over(text, background)), luminance(background)];
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}

// The opaque colour `el` is drawn over: its own and its ancestors' backgrounds composited
// (the page's white where none is set).
function backgroundOf(el) {
  const layers = [];
  for (let e = el; e && e.nodeType === 1; e = e.parentElement) {
    const c = rgba(getComputedStyle(e).backgroundColor);
    if (c && c[3] > 0) layers.push(c);
    if (c && c[3] >= 1) break;
  }
  let colour = [255, 255, 255, 1];
  for (const layer of layers.reverse()) colour = over(layer, colour);
  return colour;
}

// The first of `candidates` (CSS colours; JupyterLab variables resolved) that reads at
// MIN_CONTRAST on `background`, else the one that reads best.
function readable(candidates, background) {
  let best = null, bestRatio = 0;
  for (const css of candidates) {
    const c = css && rgba(css);
    if (!c) continue;
    const ratio = contrast(c, background);
    if (ratio >= MIN_CONTRAST) return css;
    if (ratio > bestRatio) { best = css; bestRatio = ratio; }
  }
  return best;
}

const cssColour = (c) => `rgba(${c.map((x, i) => (i < 3 ? Math.round(x) : x)).join(", ")})`;

// The theme the charts draw with (its fields: chart.js), and the tones the header uses, read
// at `el` from JupyterLab's variables; where a frontend defines none (VS Code, Colab), from the
// element's own colours.
export function readTheme(el, palette) {
  const css = getComputedStyle(el);
  const v = (name) => css.getPropertyValue(name).trim();
  const background = backgroundOf(el);
  const tones = {};
  for (const [tone, names] of Object.entries(TONES)) {
    tones[tone] = readable(names.map(v).concat([css.color]), background);
  }
  const theme = {
    text: readable([v("--jp-ui-font-color2"), v("--jp-ui-font-color1"), v("--jp-ui-font-color0"),
                    css.color], background),
    grid: v("--jp-border-color2") || "rgba(128, 128, 128, 0.25)",
    frame: v("--jp-border-color1") || "rgba(128, 128, 128, 0.6)",
    background: cssColour(background),
    font: `10px ${v("--jp-ui-font-family") || "sans-serif"}`,
    series: palette && palette.length ? palette : PALETTE,
    tones,
  };
  theme.key = JSON.stringify(theme);
  return theme;
}

// Calls `onChange` when the page's theme may have changed, until the function it returns is
// called: JupyterLab and Notebook 7 name the theme on <body> (data-jp-theme-name); other
// frontends follow the system's colour scheme.
export function watchTheme(onChange) {
  const themeWatch = new MutationObserver(onChange);
  themeWatch.observe(document.body, {attributes: true, attributeFilter: [
    "data-jp-theme-name", "data-jp-theme-light", "class", "style"]});
  const schemeWatch = window.matchMedia("(prefers-color-scheme: dark)");
  schemeWatch.addEventListener("change", onChange);
  return () => {
    themeWatch.disconnect();
    schemeWatch.removeEventListener("change", onChange);
  };
}
