// The waiting room (waiting.html): the server admits new workers at a steady rate, and this page was
// the answer to one that arrived over it (429 "busy" with Retry-After). It counts down and reloads
// the same address, which asks again. The server tells each deferred worker a different time (its
// admission slot, to the millisecond); a little random delay on top keeps two workers told nearly the
// same time from coming back in the same instant. The "Try now" link reloads the same address by hand.

const room = document.getElementById("waiting");
if (room) {
  const shown = document.getElementById("waiting-seconds");
  const wait = Math.max(100, Number(room.dataset.retryMs) || 1000);
  const due = Date.now() + wait + Math.random() * 250;
  const tick = () => {
    const left = Math.max(0, Math.ceil((due - Date.now()) / 1000));
    if (shown) shown.textContent = String(left);
    if (Date.now() >= due) {
      window.location.reload();
      return;
    }
    window.setTimeout(tick, Math.min(1000, Math.max(50, due - Date.now())));
  };
  window.setTimeout(tick, Math.min(1000, due - Date.now()));
}
