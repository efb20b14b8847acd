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


# Every worker-facing string of the page that could name the stimulus: the text shown (innerText), the text of the
# panels the page may show (the window-too-small notice, the prompt line) and every accessible name.
NAMES_IMAGES_JS = r"""() => {
  const texts = [document.body.innerText,
    ...[...document.querySelectorAll('#trial, #window-too-small, #instruction, #rating-question, #feedback')].map((e) => e.textContent),
    ...[...document.querySelectorAll('[aria-label], [alt], [title]')].flatMap(
      (e) => ['aria-label', 'alt', 'title'].map((name) => e.getAttribute(name) || ''))];
  return texts.filter((text) => /\bimages?\b/i.test(text));
}"""


def strings_naming_images(page) -> list[str]:
    """The page's worker-facing strings that say "image" (a video study's pages must say none)."""
    return page.evaluate(NAMES_IMAGES_JS)
