// The end page (done.html, stopped.html): a button that copies the completion code, and, for studies
// whose recruiter takes the participant back (Prolific, a redirect URL), a countdown that follows the
// "Continue" link by itself. The link stays visible, so nothing depends on this script running.

import { t } from "./i18n.js";

const code = document.getElementById("completion-code");
const copy = document.getElementById("btn-copy-code");

function selectCode() {
  const range = document.createRange();
  range.selectNodeContents(code);
  const selection = window.getSelection();
  selection.removeAllRanges();
  selection.addRange(range);
}

if (code && copy) {
  copy.hidden = false;
  copy.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(code.textContent.trim());
      copy.textContent = t("Copied");
    } catch {
      // No clipboard access (an insecure page, a refused permission): select it for Ctrl+C instead.
      selectCode();
      copy.textContent = t("Selected: press Ctrl+C");
    }
  });
}

const link = document.getElementById("btn-redirect");
if (link && link.dataset.autoRedirect === "true") {
  const shown = document.getElementById("redirect-seconds");
  let left = Number(link.dataset.seconds) || 5;
  const tick = () => {
    left -= 1;
    if (shown) shown.textContent = String(Math.max(left, 0));
    if (left <= 0) {
      window.location.assign(link.href);
      return;
    }
    window.setTimeout(tick, 1000);
  };
  window.setTimeout(tick, 1000);
}
