// The browser modules' strings in the page's language. The server renders them from the same gettext
// catalogs as the templates into the page (<script type="application/json" id="i18n-catalog">,
// base.html); a string the catalog lacks is shown as written.
let catalog = null;

function loaded() {
  if (catalog === null) {
    const element = typeof document === "undefined" ? null : document.getElementById("i18n-catalog");
    catalog = element ? JSON.parse(element.textContent) : {};
  }
  return catalog;
}

// t("Page %(n)s of %(total)s", {n: 2, total: 5}): gettext's named placeholders, as in the templates.
export function t(msgid, params) {
  const text = loaded()[msgid] ?? msgid;
  if (!params) return text;
  return text.replace(/%\((\w+)\)s/g, (whole, name) => (name in params ? String(params[name]) : whole));
}

// tParts("Which image is closer to the %(reference)s?", {reference: strongNode}): the translation split at
// its placeholders, each replaced by its value as is (a DOM node stays a node), for el(tag, attrs, ...parts):
// a sentence with marked-up words keeps the translator's word order.
export function tParts(msgid, params) {
  const text = loaded()[msgid] ?? msgid;
  const parts = [];
  let last = 0;
  for (const match of text.matchAll(/%\((\w+)\)s/g)) {
    if (match.index > last) parts.push(text.slice(last, match.index));
    parts.push(match[1] in params ? params[match[1]] : match[0]);
    last = match.index + match[0].length;
  }
  if (last < text.length) parts.push(text.slice(last));
  return parts;
}

// The page's language and direction (base.html's <html lang dir>), for number formats and mirrored layouts.
export const pageLocale = () => document.documentElement.lang || 'en';
export const pageIsRtl = () => document.documentElement.dir === 'rtl';
