// The page's side of the front end's views and charts, with nothing of what they show:
// elements made, and kept in step with their content (written only where it changed, so that a
// redraw keeps what the user selected or focused), a file downloaded, and the notebook's
// shortcuts kept off a view's controls.

export function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

export function setText(e, text) {
  if (e.textContent !== text) e.textContent = text;
}

export function showIf(e, shown) {
  if (e.hidden === shown) e.hidden = !shown;
}

// User text (a run's or a tag's name) in an element of its own: written in its own direction
// and isolated from the text around it (an override or a right-to-left name reorders nothing
// outside it), clipped with an ellipsis where its box ends (theme.css's .jsv-user), and whole
// in its tooltip.
export function userEl(tag, className, text) {
  const e = el(tag, `${className} jsv-user`);
  e.dir = "auto";
  if (text !== undefined) setUserText(e, text);
  return e;
}

export function setUserText(e, text) {
  setText(e, text);
  if (e.title !== text) e.title = text;
}

// Right-to-left scripts and the explicit direction marks, embeddings, overrides and isolates:
// what can reorder the text after it.
const REORDERING = new RegExp("[\\u0590-\\u08ff\\ufb1d-\\ufdff\\ufe70-\\ufeff\\u200f" +
                              "\\u202a-\\u202e\\u2066-\\u2069\\u{10800}-\\u{10fff}" +
                              "\\u{1e800}-\\u{1efff}]", "u");

// User text within a longer text (a run's name in a readout's row): where it could reorder
// what follows it, between Unicode's first strong isolate and pop directional isolate (the
// same isolation in a plain string); as it is otherwise, so that a copy holds no mark.
export function isolated(text) {
  return REORDERING.test(text) ? `\u2068${text}\u2069` : text;
}

// Makes `parent`'s children show `items` (strings), reusing the children it has.
export function syncList(parent, items, tag) {
  while (parent.children.length > items.length) parent.lastElementChild.remove();
  items.forEach((text, i) => {
    if (i >= parent.children.length) parent.append(el(tag));
    setText(parent.children[i], text);
  });
}

// Makes the list `list` show `items` (strings; null: its fold, an item holding a button that
// calls `fold.toggle` and that `fold.write(button)` labels), reusing the items it has.
export function syncFolded(list, items, fold) {
  while (list.children.length > items.length) list.lastElementChild.remove();
  items.forEach((text, i) => {
    let item = list.children[i];
    if (!item || item.classList.contains("jsv-fold") !== (text === null)) {
      const made = el("li", text === null ? "jsv-fold" : "");
      if (text === null) {
        const button = el("button", "jsv-fold-button");
        button.addEventListener("click", () => fold.toggle());
        made.append(button);
      }
      if (item) item.replaceWith(made); else list.append(made);
      item = made;
    }
    if (text === null) fold.write(item.firstElementChild); else setText(item, text);
  });
}

// Makes `parent` hold the items of `keys` in their order (`made`: key -> element or Chart),
// creating what is missing and removing what is gone; the others stay where they are.
export function syncChildren(parent, made, keys, make) {
  const nodeOf = (item) => item.el || item;
  for (const [key, item] of made) {
    if (!keys.includes(key)) {
      item.remove();
      made.delete(key);
    }
  }
  let next = parent.firstElementChild;   // where the next key's node belongs
  for (const key of keys) {
    if (!made.has(key)) made.set(key, make(key));
    const node = nodeOf(made.get(key));
    if (node === next) next = next.nextElementSibling;
    else parent.insertBefore(node, next);
  }
}

// Puts `text` in a file the browser downloads as `filename`.
export function download(filename, type, text) {
  const url = URL.createObjectURL(new Blob([text], {type}));
  const link = document.createElement("a");
  link.href = url;
  link.download = filename;
  link.style.display = "none";
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 0);
}

// Keeps the notebook's shortcuts (command mode: arrows, Space, Enter, letters) off the keys of
// the controls inside `root`, until the function it returns is called. Lumino, under
// JupyterLab (keys heard as they bubble) and Notebook 7 (as they are captured), skips an
// element marked data-lm-suppress-shortcuts: the mark is set for that one key, before the page
// hears it; keys with Ctrl, Alt or Meta, Tab and Shift+Enter stay the notebook's. Escape leaves
// a control as it is (a search field would empty itself) and gives the focus back to the
// notebook, in command mode, as Escape does in a cell.
export function keepShortcutsOff(root) {
  const onKey = (e) => {
    if (!root.contains(e.target) || e.target === root || e.ctrlKey || e.metaKey ||
        e.altKey || e.key === "Tab" || (e.shiftKey && e.key === "Enter") ||
        !e.target.matches("input, select, button, summary, [tabindex]")) return;
    if (e.key === "Escape") {
      e.preventDefault();   // Lumino too skips a key whose default was prevented
      e.target.blur();
      // The cell of the view (JupyterLab makes it the active one), else the notebook.
      const notebook = root.closest(".jp-Notebook .jp-Cell") || root.closest(".jp-Notebook");
      if (notebook) notebook.focus({preventScroll: true});
      return;
    }
    e.target.setAttribute("data-lm-suppress-shortcuts", "");
    setTimeout(() => e.target.removeAttribute("data-lm-suppress-shortcuts"), 0);
  };
  window.addEventListener("keydown", onKey, true);
  return () => window.removeEventListener("keydown", onKey, true);
}
