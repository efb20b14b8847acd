// The browser modules' strings in the page's language. The server renders them from the same gettext
// catalogs as the templates into the page (<script type="application/json" id="i18n-catalog">,
// base.html; server/i18n.py browser_catalog); a string the catalog lacks is shown as written.
let catalog = null;

function loaded() {
  if (catalog === null) {
    const element = typeof document === "undefined" ? null : document.getElementById("i18n-catalog");
    const data = element ? JSON.parse(element.textContent) : {};
    catalog = { messages: data.messages || {}, pluralTags: data.plural_tags || ["one", "other"] };
  }
  return catalog;
}

function fill(text, params) {
  if (!params) return text;
  return text.replace(/%\((\w+)\)s/g, (whole, name) => (name in params ? String(params[name]) : whole));
}

// t("Page %(n)s of %(total)s", {n: 2, total: 5}): gettext's named placeholders, as in the templates.
export function t(msgid, params) {
  const text = loaded().messages[msgid];
  return fill(typeof text === "string" ? text : msgid, params);
}

// The page's language and direction (base.html's <html lang dir>), for plural rules and mirrored layouts.
export const pageLocale = () => (typeof document === "undefined" ? "en" : document.documentElement.lang || "en");
export const pageIsRtl = () => typeof document !== "undefined" && document.documentElement.dir === "rtl";

// tn("%(num)s page", "%(num)s pages", n, params): ngettext. The form is the one of n's CLDR plural category
// (Intl.PluralRules) in the catalog's order of forms (Arabic has six, German two); %(num)s is n.
export function tn(singular, plural, n, params = {}) {
  const { messages, pluralTags } = loaded();
  const forms = messages[singular];
  let text = n === 1 ? singular : plural;
  if (Array.isArray(forms)) {
    const index = pluralTags.indexOf(new Intl.PluralRules(pageLocale()).select(n));
    text = forms[index >= 0 ? index : forms.length - 1];
  }
  return fill(text, { num: n, ...params });
}

// tParts("Which image is closer to the %(reference)s?", {reference: strongNode}): the translation split at
// its placeholders, each replaced by its value as is (a DOM node stays a node), for el(tag, attrs, ...parts):
// a sentence with marked-up words keeps the translator's word order.
export function tParts(msgid, params) {
  const found = loaded().messages[msgid];
  const text = typeof found === "string" ? found : msgid;
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
