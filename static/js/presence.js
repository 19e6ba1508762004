// Who else is viewing this session or approval card (dashboard/presence.py).
//
// Every element with data-presence="session:12" / "approval:7" shows the other
// people viewing that topic. The tab says what it is *on* (the session page and
// its inline cards, the single card page, the inbox's selected card) and what
// else it *watches* (the inbox's other cards), when it connects, every
// heartbeat and whenever that changes; the server pushes the viewers.
//
// Names are other people's text: set with textContent only, never as markup
// (the CSP allows scripts from 'self' only, no inline style).
(function () {
  "use strict";

  const SEL = "[data-presence]";
  const COLORS = 6; // .viewer-c0 … .viewer-c5 in desk.css
  let heartbeatMs = 5000;
  let ws = null;
  let you = null;
  let lastSent = "";
  let delay = 500;
  const viewers = new Map(); // topic -> [{user, name, initials, tabs}]

  const inInbox = (el) => !!el.closest("#approvals[data-ws]");

  // What the tab is on, and what it shows without being on it.
  function topics() {
    const on = new Set();
    const watch = new Set();
    for (const el of document.querySelectorAll(SEL)) {
      const topic = el.dataset.presence;
      const card = el.closest(".approval");
      if (inInbox(el) && !(card && card.classList.contains("selected"))) watch.add(topic);
      else on.add(topic);
    }
    for (const t of on) watch.delete(t);
    return { topics: Array.from(on).slice(0, 20), watch: Array.from(watch).slice(0, 200) };
  }

  function send(force) {
    if (!ws || ws.readyState !== WebSocket.OPEN) return;
    const now = topics();
    const text = JSON.stringify({ type: "here", topics: now.topics, watch: now.watch });
    if (!force && text === lastSent) return;
    lastSent = text;
    ws.send(text);
  }

  function render(el) {
    const others = (viewers.get(el.dataset.presence) || []).filter((v) => v.user !== you);
    el.replaceChildren();
    el.hidden = others.length === 0;
    el.dataset.viewers = others.map((v) => v.name).join(",");
    if (!others.length) return;
    const label = document.createElement("span");
    label.className = "presence-label";
    label.textContent = "Also viewing:";
    const list = document.createElement("ul");
    list.className = "presence-list";
    for (const v of others) {
      const item = document.createElement("li");
      item.className = "viewer viewer-c" + (Math.abs(v.user) % COLORS);
      const avatar = document.createElement("span");
      avatar.className = "avatar";
      avatar.setAttribute("aria-hidden", "true");
      avatar.textContent = v.initials;
      const name = document.createElement("span");
      name.className = "name";
      name.textContent = v.name + (v.tabs > 1 ? " (" + v.tabs + " tabs)" : "");
      item.append(avatar, name);
      list.append(item);
    }
    el.append(label, list);
  }

  function renderTopic(topic) {
    for (const el of document.querySelectorAll(SEL)) if (el.dataset.presence === topic) render(el);
  }

  function open() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    ws = new WebSocket(scheme + location.host + "/ws/presence/");
    ws.addEventListener("open", () => {
      delay = 500;
      send(true);
    });
    ws.addEventListener("message", (e) => {
      let message;
      try {
        message = JSON.parse(e.data);
      } catch (_) {
        return;
      }
      if (message.type !== "presence") return;
      you = message.you;
      if (message.heartbeat_s) heartbeatMs = Math.max(1000, message.heartbeat_s * 1000);
      for (const [topic, list] of Object.entries(message.viewers || {})) {
        viewers.set(topic, Array.isArray(list) ? list : []);
        renderTopic(topic);
      }
    });
    ws.addEventListener("close", (e) => {
      // What we showed may be stale now: show nothing rather than the past.
      viewers.clear();
      document.querySelectorAll(SEL).forEach(render);
      lastSent = "";
      if (e.code === 4401 || e.code === 4403) return; // signed out / no role: desk.js says so
      setTimeout(open, delay);
      delay = Math.min(delay * 2, 10000);
    });
  }

  function heartbeat() {
    send(true);
    setTimeout(heartbeat, heartbeatMs);
  }

  document.addEventListener("DOMContentLoaded", () => {
    if (!document.querySelector(SEL)) return;
    open();
    setTimeout(heartbeat, heartbeatMs);
    // Cards come and go (live pushes, htmx swaps) and the inbox's selection
    // moves: say so soon, and draw fresh elements from what we know.
    let timer = null;
    new MutationObserver((mutations) => {
      for (const m of mutations) {
        for (const node of m.addedNodes) {
          if (node.nodeType !== 1) continue;
          if (node.matches(SEL)) render(node);
          node.querySelectorAll(SEL).forEach(render);
        }
      }
      if (!timer) timer = setTimeout(() => ((timer = null), send(false)), 150);
    }).observe(document.body, { childList: true, subtree: true, attributes: true, attributeFilter: ["class"] });
    // Leave at once when the tab goes (the close reaches the server first).
    window.addEventListener("pagehide", () => ws && ws.close(1000));
  });
})();
