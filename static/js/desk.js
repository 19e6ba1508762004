// Agentdesk desk: live updates over WebSockets, and keyboard shortcuts.
//
// Safety rules this file keeps (ticket and model text is hostile):
// - markup only ever comes from server-rendered, autoescaped partials (the
//   `swaps` of a push, or an htmx response); everything else is set with
//   textContent;
// - no inline handlers or eval: the CSP allows scripts from 'self' only.
//
// Live updates never trust the channel: the page knows the last event seq it
// shows, says so when it connects, and the server replays the rest from
// Postgres before going live (dashboard/consumers.py).
(function () {
  "use strict";

  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));
  const codepoints = (s) => Array.from(s || ""); // offsets are counted in code points

  // --- A socket that reconnects ---------------------------------------------------

  function liveSocket(path, handlers) {
    const badge = document.getElementById("live-status");
    let ws = null;
    let delay = 500;
    // Once a close said the login ended (4401), the refused handshakes that
    // follow (the browser reports them as 1006, without the server's reason)
    // still mean that: the tab says "signed out" until a socket opens again.
    let signedOut = false;
    const show = (state, text) => {
      document.body.dataset.live = state;
      if (badge) {
        badge.hidden = false;
        badge.textContent = text;
        badge.dataset.state = state;
      }
    };
    const send = (message) => {
      if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(message));
    };
    const open = () => {
      const scheme = location.protocol === "https:" ? "wss://" : "ws://";
      ws = new WebSocket(scheme + location.host + path);
      ws.addEventListener("open", () => {
        delay = 500;
        signedOut = false;
        show("open", "live");
        handlers.open(send);
      });
      ws.addEventListener("message", (e) => {
        let message;
        try {
          message = JSON.parse(e.data);
        } catch (_) {
          return;
        }
        handlers.message(message, send);
      });
      ws.addEventListener("close", (e) => {
        // 4401: the login behind this tab ended (logged out elsewhere, password
        // changed, role removed). Reconnecting works only if it still holds.
        signedOut = signedOut || e.code === 4401;
        show("closed", signedOut ? "signed out — log in again" : "reconnecting…");
        setTimeout(open, delay);
        delay = Math.min(delay * 2, 10000);
      });
    };
    open();
    // A lost push of the last event leaves no gap to notice: ask now and then.
    setInterval(() => send({ type: "sync" }), 15000);
    return { send };
  }

  // --- Swapping server-rendered fragments -----------------------------------------

  function fragment(html) {
    const template = document.createElement("template");
    template.innerHTML = html; // scripts in a template never run; the CSP blocks them anyway
    return template.content;
  }

  // A swap that would replace what someone is typing in waits until they leave it.
  const deferred = new Map();

  function applySwap(swap) {
    const old = document.getElementById(swap.target);
    if (old && old.contains(document.activeElement) && document.activeElement.matches("input, textarea")) {
      deferred.set(swap.target, swap);
      return;
    }
    const content = fragment(swap.html);
    // A turn re-rendered by a push keeps the timelines and raw outputs its
    // reader had opened (details with an id).
    const opened = old ? $$("details[id][open]", old).map((d) => d.id) : [];
    if (old) {
      old.replaceWith(content);
    } else if (swap.into) {
      const box = document.getElementById(swap.into);
      if (!box) return;
      // Turns keep their order even when an older one (not shown yet) changes.
      const number = content.firstElementChild && content.firstElementChild.dataset.number;
      const later = number
        ? Array.from(box.children).find((c) => c.dataset.number && +c.dataset.number > +number)
        : null;
      if (later) box.insertBefore(content, later);
      else box.append(content);
    } else {
      return;
    }
    const fresh = document.getElementById(swap.target);
    for (const id of opened) {
      const details = document.getElementById(id);
      if (details) details.open = true;
    }
    if (fresh && window.htmx) window.htmx.process(fresh);
  }

  document.addEventListener("focusout", () => {
    setTimeout(() => {
      for (const [target, swap] of deferred) {
        const el = document.getElementById(target);
        if (!el || !el.contains(document.activeElement)) {
          deferred.delete(target);
          applySwap(swap);
        }
      }
    }, 0);
  });

  // --- The session page -------------------------------------------------------------

  const TURN_DONE = new Set(["model.replied", "turn.succeeded", "turn.failed", "turn.canceled", "turn.waiting"]);

  function sessionPage(root) {
    let lastSeq = parseInt(root.dataset.seq, 10) || 0;
    const live = document.getElementById("live-text");
    const liveText = $(".text", live);
    let streamTurn = live.dataset.turn ? parseInt(live.dataset.turn, 10) : null;
    let streamLength = parseInt(live.dataset.length, 10) || 0;
    let askedSnapshot = false;

    const setStream = (turn, text) => {
      streamTurn = text ? turn : null;
      liveText.textContent = text;
      streamLength = codepoints(text).length;
      live.dataset.turn = streamTurn === null ? "" : String(streamTurn);
      live.dataset.length = String(streamLength);
      live.hidden = !text;
    };

    const onDelta = (delta, send) => {
      if (delta.turn_id !== streamTurn) {
        if (delta.offset !== 0) {
          if (!askedSnapshot) send({ type: "stream" });
          askedSnapshot = true;
          return;
        }
        setStream(delta.turn_id, "");
        streamTurn = delta.turn_id;
      }
      const chars = codepoints(delta.text);
      if (delta.offset > streamLength) {
        // We missed a piece (the layer drops, or we connected late): ask for all of it.
        if (!askedSnapshot) send({ type: "stream" });
        askedSnapshot = true;
        return;
      }
      const fresh = chars.slice(streamLength - delta.offset).join("");
      if (!fresh) return; // already shown
      liveText.textContent += fresh;
      streamLength += codepoints(fresh).length;
      live.dataset.length = String(streamLength);
      live.dataset.turn = String(streamTurn);
      live.hidden = false;
    };

    const onEvents = (message) => {
      const events = message.events.filter((e) => e.seq > lastSeq);
      if (!events.length) return;
      for (const swap of message.swaps || []) applySwap(swap);
      const placeholder = document.getElementById("no-turns");
      if (placeholder && $(".turn", root)) placeholder.remove();
      for (const event of events) {
        // The recorded reply (now in the transcript) replaces the streamed text.
        if (TURN_DONE.has(event.kind) && event.turn_id === streamTurn) setStream(null, "");
        lastSeq = event.seq;
      }
      root.dataset.seq = String(lastSeq);
    };

    sessionKeys(root);

    liveSocket(root.dataset.ws, {
      open: (send) => send({ type: "hello", after: lastSeq }),
      message: (message, send) => {
        if (message.type === "events") onEvents(message);
        else if (message.type === "delta") onDelta(message, send);
        else if (message.type === "stream") {
          askedSnapshot = false;
          setStream(message.turn_id, message.text);
        }
      },
    });
  }

  // j/k between turns, t a turn's timeline, o its raw tool outputs, m the
  // message box, h the history.
  function sessionKeys(root) {
    const turns = () => $$("#turns > .turn", root);
    const current = () => $("#turns > .turn.selected", root);
    const toggle = (items) => {
      const open = !items.every((d) => d.open);
      items.forEach((d) => (d.open = open));
      return items.length > 0;
    };
    onKeys((key) => {
      if (key === "j" || key === "k") {
        const next = move(turns(), current(), key === "j" ? 1 : -1, "selected");
        if (next) next.focus({ preventScroll: true });
        return !!next;
      }
      if (key === "t") {
        const turn = current();
        return toggle($$("details.timeline", turn || root));
      }
      if (key === "o") {
        const turn = current() || turns()[turns().length - 1];
        return turn ? toggle($$("details.raw", turn)) : false;
      }
      if (key === "m") {
        const box = document.getElementById("message-text");
        if (box) box.focus();
        return !!box;
      }
      if (key === "h") {
        const link = $("#session-head a[data-key=history]");
        if (link) location.href = link.href;
        return !!link;
      }
      return false;
    });
  }

  // --- The sessions list ---------------------------------------------------------------

  function sessionsPage(box) {
    let timer = null;
    let inflight = false;
    let again = false;

    const refresh = () => {
      if (inflight) {
        again = true;
        return;
      }
      inflight = true;
      const selected = $(".row.selected", box);
      const selectedId = selected ? selected.id : null;
      fetch(location.href, { headers: { "HX-Request": "true" }, credentials: "same-origin", cache: "no-store" })
        .then((r) => (r.ok ? r.text() : null))
        .then((html) => {
          if (!html) return;
          applySwap({ target: "session-list", html: html });
          if (selectedId && document.getElementById(selectedId)) {
            document.getElementById(selectedId).classList.add("selected");
          }
        })
        .catch(() => {})
        .finally(() => {
          inflight = false;
          if (again) {
            again = false;
            schedule();
          }
        });
    };
    // Many sessions change at once under load: one refetch per 0.7 s at most.
    const schedule = () => {
      if (!timer) timer = setTimeout(() => ((timer = null), refresh()), 700);
    };

    liveSocket(box.dataset.ws, {
      open: () => schedule(), // catch up with what changed while we were away
      message: (message) => {
        if (message.type === "changed") schedule();
      },
    });

    onKeys((key) => {
      const rows = $$("#session-list tr.row");
      const current = $("#session-list tr.row.selected");
      if (key === "/") {
        $("#q").focus();
        return true;
      }
      if (key === "j" || key === "k") {
        move(rows, current, key === "j" ? 1 : -1, "selected");
        return true;
      }
      if (key === "Enter" && current) {
        location.href = current.dataset.href;
        return true;
      }
      return false;
    });
  }

  function move(items, current, step, cls) {
    if (!items.length) return null;
    let index = current ? items.indexOf(current) + step : 0;
    index = Math.max(0, Math.min(items.length - 1, index));
    items.forEach((item) => item.classList.remove(cls));
    const next = items[index];
    next.classList.add(cls);
    next.scrollIntoView({ block: "nearest" });
    return next;
  }

  // --- The approvals inbox -----------------------------------------------------------------

  function approvalsPage(box) {
    const note = document.getElementById("inbox-status");
    const cards = () => $$(".approval[data-approval]", box);
    const selected = () => $(".approval.selected", box);

    const select = (card) => {
      cards().forEach((c) => c.classList.remove("selected"));
      if (!card) return;
      card.classList.add("selected");
      card.focus({ preventScroll: true });
      card.scrollIntoView({ block: "nearest" });
    };
    const recount = () => {
      const pending = cards().filter((c) => c.classList.contains("approval-pending")).length;
      $("#approval-count").textContent = String(pending);
      $("#inbox-empty").hidden = cards().length > 0;
    };

    const onApprovals = (message) => {
      for (const gone of message.remove) {
        const card = document.getElementById("approval-" + gone.id);
        if (!card) continue;
        const wasSelected = card.classList.contains("selected");
        const next = card.nextElementSibling || card.previousElementSibling;
        const tool = $(".approval-head code", card);
        card.remove();
        note.textContent =
          "Approval " + gone.id + (tool ? " (" + tool.textContent + ")" : "") + " was " + gone.status +
          (gone.by ? " by " + gone.by : "") + "; it left the inbox.";
        if (wasSelected) select(next && next.matches(".approval") ? next : null);
      }
      const place = (card, html) => {
        if (document.getElementById("approval-" + card.id)) return;
        const later = cards().find((c) => c.dataset.created > card.created);
        const content = fragment(html);
        if (later) box.insertBefore(content, later);
        else box.append(content);
        const fresh = document.getElementById("approval-" + card.id);
        if (fresh && window.htmx) window.htmx.process(fresh);
      };
      for (const card of message.add) {
        if (document.getElementById("approval-" + card.id)) continue;
        if (card.ref) {
          // A big card comes by reference (dashboard/pushes.py): fetched as htmx would.
          fetch(card.ref, { headers: { "HX-Request": "true" }, credentials: "same-origin" })
            .then((r) => (r.ok ? r.text() : null))
            .then((html) => {
              if (html) {
                place(card, html);
                recount();
              }
            });
          continue;
        }
        place(card, card.html);
      }
      recount();
      if (!selected() && cards().length && !box.contains(document.activeElement)) select(cards()[0]);
    };

    if (box.dataset.ws) {
      liveSocket(box.dataset.ws, {
        open: (send) => send({ type: "hello", shown: cards().map((c) => parseInt(c.dataset.approval, 10)) }),
        message: (message) => {
          if (message.type === "approvals") onApprovals(message);
        },
      });
    }

    if (cards().length) select(cards()[0]);

    onKeys((key) => {
      const card = selected();
      if (key === "j" || key === "k") {
        select(move(cards(), card, key === "j" ? 1 : -1, "selected"));
        return true;
      }
      if (!card) return false;
      if (key === "a") {
        // Arms the decision: the focused Approve button then takes Enter.
        const button = $("button[data-action=approve]", card);
        if (button) button.focus();
        return !!button;
      }
      if (key === "e" || key === "d") {
        const details = $(key === "e" ? "details.edit" : "details.deny", card);
        if (!details) return false;
        details.open = true;
        $("textarea", details).focus();
        return true;
      }
      return false;
    });

    // A rate-limited write (429) is not swapped into the card: say so instead.
    document.body.addEventListener("htmx:responseError", (e) => {
      const xhr = e.detail.xhr;
      const badge = document.getElementById("live-status");
      if (!xhr || xhr.status !== 429 || !badge) return;
      badge.hidden = false;
      badge.dataset.state = "limited";
      badge.textContent = `Too many requests: try again in ${xhr.getResponseHeader("Retry-After") || "a few"} s`;
    });
    // A decided card comes back from the server (htmx): keep it selected.
    document.body.addEventListener("htmx:afterSwap", (e) => {
      const card = e.detail.target && e.detail.target.id ? document.getElementById(e.detail.target.id) : null;
      if (card && card.matches(".approval") && box.contains(card)) select(card);
      recount();
    });
  }

  // --- Keyboard ---------------------------------------------------------------------------

  const keyHandlers = [];
  function onKeys(handler) {
    keyHandlers.push(handler);
  }

  // `?` anywhere: the keys of this page (templates/dashboard/partials/_keys.html).
  function showKeys() {
    const dialog = document.getElementById("key-help");
    if (!dialog || dialog.open) return false;
    const page = document.body.dataset.page || "";
    for (const section of $$("[data-keys-for]", dialog)) {
      section.hidden = !(section.dataset.keysFor === "*" || section.dataset.keysFor === page);
    }
    dialog.showModal();
    return true;
  }

  // `g` then a letter: go to a page (the letter must follow within 1.5 s).
  const GO = { s: "/", a: "/approvals/", o: "/ops/", j: "/jobs/" };
  let goPending = 0;
  onKeys((key) => {
    if (goPending && Date.now() - goPending < 1500 && GO[key]) {
      goPending = 0;
      location.href = GO[key];
      return true;
    }
    goPending = key === "g" ? Date.now() : 0;
    if (key === "g") return true;
    if (key === "?") return showKeys();
    return false;
  });

  document.addEventListener("keydown", (e) => {
    const target = e.target;
    if (document.querySelector("dialog[open]")) return; // the dialog has the keys (Esc closes it)
    const typing = target.matches && target.matches("input, textarea, select, [contenteditable]");
    if (typing) {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && target.form) {
        e.preventDefault();
        target.form.requestSubmit(); // htmx handles the submit event
      } else if (e.key === "Escape") {
        const details = target.closest("details");
        if (details) details.open = false;
        target.blur();
        const card = target.closest(".approval");
        if (card) card.focus({ preventScroll: true });
      }
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    for (const handler of keyHandlers) {
      if (handler(e.key)) {
        // Enter on a focused button or link keeps its own meaning.
        if (!(e.key === "Enter" && target.matches && target.matches("button, a"))) e.preventDefault();
        return;
      }
    }
  });

  // 1–5 on the operations page: its time windows, in the order of the tabs.
  function operationsKeys() {
    onKeys((key) => {
      const tabs = $$("nav.tabs[aria-label='Time window'] a");
      const n = parseInt(key, 10);
      if (!(n >= 1 && n <= tabs.length)) return false;
      location.href = tabs[n - 1].href;
      return true;
    });
  }

  // --- Time left before an approval expires --------------------------------------------------

  function countdowns() {
    const now = Date.now();
    for (const el of $$("time[data-expires]")) {
      const left = Math.round((Date.parse(el.dataset.expires) - now) / 1000);
      if (left <= 0) {
        el.textContent = "now (expired)";
        continue;
      }
      const h = Math.floor(left / 3600);
      const m = Math.floor((left % 3600) / 60);
      const s = left % 60;
      el.textContent = "in " + (h ? h + "h " + m + "m" : m ? m + "m " + s + "s" : s + "s");
    }
  }

  // A page restored from the back/forward cache shows the past: load it again.
  window.addEventListener("pageshow", (e) => {
    if (e.persisted) location.reload();
  });

  // --- Start ----------------------------------------------------------------------------------

  document.addEventListener("DOMContentLoaded", () => {
    const session = document.getElementById("session");
    if (session && session.dataset.ws) sessionPage(session);
    const desk = document.getElementById("desk-live");
    if (desk) sessionsPage(desk);
    const inbox = document.getElementById("approvals");
    if (inbox) approvalsPage(inbox);
    const keysButton = document.getElementById("key-help-button");
    if (keysButton) keysButton.addEventListener("click", showKeys);
    if (document.body.dataset.page === "operations") operationsKeys();
    countdowns();
    setInterval(countdowns, 1000);
  });
})();
