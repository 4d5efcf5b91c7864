/* The New deployment page (templates/admin/deploy/deploy.html). Without it the page works the
   same; with it: the account list follows the partition (only the accounts it takes), the
   partition's fit note follows the choice, and a changed field's source reads "you". */
(function () {
  "use strict";

  function partitions() {
    var node = document.getElementById("dp-partitions");
    if (!node) return {};
    try { return JSON.parse(node.textContent) || {}; } catch (e) { return {}; }
  }

  function option(value, label) {
    var o = document.createElement("option");
    o.value = value;
    o.textContent = label;
    return o;
  }

  function followPartition(data) {
    var select = document.getElementById("dp-ov-partition");
    var list = document.getElementById("dp-ov-account-list");
    var text = document.getElementById("dp-ov-account");
    var fit = document.getElementById("dp-partition-fit");
    if (!select || select.tagName !== "SELECT") return;
    var info = data[select.value];
    if (fit) fit.textContent = info ? info.message : "";
    if (!list || !text || !info) return;
    var current = list.disabled ? text.value : list.value;
    if (info.accounts === null || info.accounts === undefined) {
      list.disabled = true; list.hidden = true;
      text.disabled = false; text.hidden = false;
      text.value = current;
      return;
    }
    while (list.firstChild) list.removeChild(list.firstChild);
    list.appendChild(option("", "your default account"));
    info.accounts.forEach(function (name) { list.appendChild(option(name, name)); });
    list.value = info.accounts.indexOf(current) >= 0 ? current : "";
    list.disabled = false; list.hidden = false;
    text.disabled = true; text.hidden = true;
  }

  function value(el) {
    if (el.type === "checkbox") return el.checked ? "true" : "false";
    return el.value;
  }

  function same(el) {
    var base = el.getAttribute("data-base") || "";
    if (el.type === "checkbox") {
      return (["true", "on", "1", "yes"].indexOf(base.trim().toLowerCase()) >= 0) === el.checked;
    }
    return value(el).replace(/\r\n/g, "\n").trim() === base.replace(/\r\n/g, "\n").trim();
  }

  function markSource(el) {
    var field = el.closest(".dp-field");
    var badge = field && field.querySelector(".dp-src[data-was]");
    if (!badge) return;
    var now = same(el) ? badge.getAttribute("data-was") || "not set" : "you";
    badge.textContent = now;
    badge.setAttribute("data-source", now);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var form = document.getElementById("dp-form");
    if (!form) return;
    var data = partitions();
    var select = document.getElementById("dp-ov-partition");
    if (select) select.addEventListener("change", function () { followPartition(data); });
    form.querySelectorAll("[data-base]").forEach(function (el) {
      var handler = function () { markSource(el); };
      el.addEventListener("input", handler);
      el.addEventListener("change", handler);
    });
  });
})();
