"""Shared helpers of the video browser tests (ratings and paired comparison).

A support module, not a test module: test modules import it (they never import each other).
"""
from __future__ import annotations

# The browser refuses the first play() as a browser without a user gesture does (iOS Safari, Chrome's policy).
REFUSE_FIRST_PLAY = """(() => {
  const play = HTMLMediaElement.prototype.play;
  let refused = false;
  HTMLMediaElement.prototype.play = function () {
    if (!refused) { refused = true; return Promise.reject(new DOMException('no gesture', 'NotAllowedError')); }
    return play.call(this);
  };
})();"""


def enter_and_start(page, url: str) -> None:
    """Open a worker link, agree to the consent and start (the instructions' button)."""
    page.goto(url)
    page.check("#agree")
    page.click("#btn-consent")
    page.click("#btn-start")
