// The browser modules' strings in the page's language. The server renders them from the same gettext
// catalogs as the templates into the page (<script type="application/json" id="i18n-catalog">,
// base.html); a string the catalog lacks is shown as written.
let catalog = null;

function loaded() {
  if (catalog === null) {
    const element = document.getElementById("i18n-catalog");
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
