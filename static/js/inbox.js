// Agentdesk approvals: SLA clocks, sorting, selection for bulk approval, and
// the inbox keys desk.js does not know (t take / give back, x select, b
// approve selected). desk.js owns j/k/a/e/d and the live pushes; this file
// only reads the cards it renders and clicks their own buttons.
//
// Safety: no markup is built here (text only; server partials do the rest),
// no inline handlers or eval: the CSP allows scripts from 'self' only.
(function () {
  "use strict";

  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));

  // --- SLA clocks ----------------------------------------------------------------

  function left(ms) {
    const s = Math.max(0, Math.round(ms / 1000));
    const h = Math.floor(s / 3600);
    const m = Math.floor((s % 3600) / 60);
    const r = s % 60;
    return h ? h + "h " + m + "m" : m ? m + "m " + r + "s" : r + "s";
  }

  function tick() {
    const now = Date.now();
    for (const el of $$("[data-sla]")) {
      const expires = Date.parse(el.dataset.expires);
      const warn = Date.parse(el.dataset.warn);
      const state = now >= expires ? "expired" : now >= warn ? "warning" : "ok";
      const countdown = $("[data-countdown]", el);
      if (countdown) countdown.textContent = state === "expired" ? "(time is up)" : "in " + left(expires - now);
      if (el.dataset.state === state) continue;
      el.dataset.state = state;
      el.classList.remove("sla-ok", "sla-warning", "sla-expired");
      el.classList.add("sla-" + state);
      const label = $("[data-sla-label]", el);
      if (label) label.textContent = state === "expired" ? "Expired" : state === "warning" ? "Expiring soon" : "Expires";
      const card = el.closest(".approval");
      if (card) {
        card.classList.remove("sla-ok", "sla-warning", "sla-expired");
        card.classList.add("sla-" + state);
      }
    }
  }

  // --- Sorting (cards pushed live land in the right place) ---------------------------

  const KEYS = {
    time_left: (c) => [Date.parse(c.dataset.expires), +c.dataset.approval],
    newest: (c) => [-Date.parse(c.dataset.created), -c.dataset.approval],
    amount: (c) => [-(+c.dataset.amount || 0), Date.parse(c.dataset.created)],
    session: (c) => [c.dataset.session || "", Date.parse(c.dataset.created)],
  };

  function compare(a, b) {
    for (let i = 0; i < a.length; i++) {
      if (a[i] < b[i]) return -1;
      if (a[i] > b[i]) return 1;
    }
    return 0;
  }

  function sortCards(box) {
    const key = KEYS[box.dataset.sort] || KEYS.time_left;
    const cards = $$(":scope > .approval[data-approval]", box);
    const sorted = cards.slice().sort((a, b) => compare(key(a), key(b)));
    if (sorted.every((c, i) => c === cards[i])) return; // already in order: no mutation
    const focused = document.activeElement;
    for (const card of sorted) box.append(card);
    if (focused && box.contains(focused)) focused.focus({ preventScroll: true });
  }

  // --- Selection for bulk approval ------------------------------------------------------

  function recountPicked() {
    const count = document.getElementById("bulk-count");
    if (count) count.textContent = String($$("input.bulk-pick:checked").length);
  }

  function inbox(box) {
    sortCards(box);
    new MutationObserver(() => {
      sortCards(box);
      recountPicked();
    }).observe(box, { childList: true });
    document.addEventListener("change", (e) => {
      if (e.target.matches && e.target.matches("input.bulk-pick")) recountPicked();
    });
    document.body.addEventListener("htmx:afterSwap", recountPicked);
    recountPicked();

    document.addEventListener("keydown", (e) => {
      const t = e.target;
      if (t.matches && t.matches("input:not([type=checkbox]), textarea, select, [contenteditable]")) return;
      if (e.ctrlKey || e.metaKey || e.altKey) return;
      const card = $(".approval.selected", box);
      if (e.key === "t" && card) {
        const button = $("button[data-action=take], button[data-action=give-back]", card);
        if (button) {
          e.preventDefault();
          button.click();
        }
      } else if (e.key === "x" && card) {
        const pick = $("input.bulk-pick", card);
        const note = document.getElementById("inbox-status");
        e.preventDefault();
        if (pick) {
          pick.checked = !pick.checked;
          recountPicked();
        } else if (note) {
          note.textContent = "This card needs several approvers or an admin: decide it on its own.";
        }
      } else if (e.key === "b") {
        const bulk = $("#bulk-form button[data-action=bulk]");
        if (bulk) {
          e.preventDefault();
          bulk.click();
        }
      }
    });

    // The confirmation arrives focused on its button, so Enter confirms.
    document.body.addEventListener("htmx:afterSwap", (e) => {
      if (!e.detail.target || e.detail.target.id !== "bulk-panel") return;
      const confirm = $("button[data-action=bulk-confirm]", e.detail.target);
      if (confirm) confirm.focus();
      for (const pick of $$("input.bulk-pick:checked")) {
        if ($("#bulk-panel .notice")) pick.checked = false;
      }
      recountPicked();
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    tick();
    setInterval(tick, 1000);
    const box = document.getElementById("approvals");
    if (box) inbox(box);
  });
})();
