// The browser's notifications (its Notification API) of a run: each of the state's `alerts`
// ({id, kind, title, text}: a run's end, a stall...) and the kernel gone, once per model of the
// page (what was notified is kept on the link the model's views share), only while "Notify me"
// is on (the `notify` setting) and the browser allows them. A module of the front end
// (widget.py joins its files); the View (panel.js) calls it with itself.

import {setText} from "./dom.js";

export function notifying(view) {
  return view.settings().notify && typeof Notification !== "undefined" &&
    Notification.permission === "granted";
}

// A click asks the browser's permission (only a user's gesture may), then keeps the choice
// with the settings.
export async function toggleNotify(view) {
  if (notifying(view)) {
    view.change({notify: false});
    return;
  }
  if (typeof Notification === "undefined") {
    setText(view.messageEl, "This browser shows no notifications here (it needs https or " +
            "localhost).");
    return;
  }
  const permission = Notification.permission === "granted" ? "granted"
    : await Notification.requestPermission();
  if (permission === "granted") view.change({notify: true});
  else setText(view.messageEl, "Notifications are blocked for this page in the browser.");
}

// Each alert once per model (the views of a model share what was notified), from the moment
// notifications are on: the alerts there already are seen, not notified.
export function notifyAlerts(view, alerts) {
  const link = view.link;
  const fresh = alerts.filter((a) => !link.notified || !link.notified.has(a.id));
  if (!link.notified || !notifying(view)) {
    link.notified = new Set([...(link.notified || []), ...alerts.map((a) => a.id)]);
    return;
  }
  for (const alert of fresh) {
    link.notified.add(alert.id);
    notify(view, alert.title, alert.text, alert.id);
  }
}

// Once per loss of the kernel, by one view of the model.
export function notifyGone(view) {
  const link = view.link;
  if (link.health !== "gone") link.goneNotified = false;
  else if (!link.goneNotified && link.answered !== null && notifying(view)) {
    link.goneNotified = true;
    notify(view, `${link.state.name || "run"}: kernel gone`,
           "The kernel no longer answers: re-run the cell to resume.", "kernel-gone");
  }
}

// One notification; `tag` makes the same one from two views (or two pages) replace itself.
function notify(view, title, body, tag) {
  try {
    new Notification(title, {body, tag: `jsv-${view.link.state.key || ""}-${tag}`});
  } catch (error) {  // a browser that allows them only from a service worker
    setText(view.messageEl, `${title}: ${body}`);
  }
}
