// splash web chat: one conversation, streamed from this server's OpenAI-compatible API.
// Plain browser JavaScript, no build step. Markdown comes from Debian's marked, code
// highlighting from highlight.js, and the rendered HTML goes through DOMPurify, because
// model output is untrusted: raw HTML in it is shown as text and only http(s) links survive.
"use strict";

(() => {
  const CONVERSATION_KEY = "splash.conversation.v1";
  const SETTINGS_KEY = "splash.settings.v1";
  const API_KEY_KEY = "splash.apiKey";
  const DEFAULT_MAX_TOKENS = 1024;
  const RENDER_INTERVAL_MS = 50;    // re-render a streaming reply at most this often
  const SAVE_INTERVAL_MS = 500;     // persist a streaming reply at most this often
  const AUTO_HIGHLIGHT_LIMIT = 20000;  // language auto-detection is skipped for larger blocks

  const $ = (id) => document.getElementById(id);
  const els = {
    chat: $("chat"), messages: $("messages"), empty: $("empty"), model: $("model-name"),
    composer: $("composer"), input: $("input"), send: $("send"), stop: $("stop"),
    newChat: $("new-chat"), settingsToggle: $("settings-toggle"), settings: $("settings"),
    system: $("system-prompt"), maxTokens: $("max-tokens"), temperature: $("temperature"),
    keyPanel: $("api-key-panel"), keyForm: $("api-key-form"), key: $("api-key"),
  };

  // ---- storage (localStorage can be unavailable or full; the page still works without it)

  function load(key, fallback) {
    try {
      const text = localStorage.getItem(key);
      return text === null ? fallback : JSON.parse(text);
    } catch (_) {
      return fallback;
    }
  }
  function store(key, value) {
    try {
      if (value === null) localStorage.removeItem(key);
      else localStorage.setItem(key, JSON.stringify(value));
    } catch (_) { /* quota or privacy mode: keep going in memory */ }
  }

  // A message: {role: "user"|"assistant", content, model?, reasoning?, stats?, error?, pending?}
  let messages = [];
  let settings = { system: "", maxTokens: DEFAULT_MAX_TOKENS, temperature: "" };
  let apiKey = load(API_KEY_KEY, "") || "";
  let modelId = null;
  let inflight = null;  // {controller, msg, view}
  let lastSave = 0;

  function saveConversation() {
    lastSave = Date.now();
    store(CONVERSATION_KEY, { version: 1, messages });
  }

  function restore() {
    const saved = load(CONVERSATION_KEY, null);
    if (saved && Array.isArray(saved.messages)) {
      messages = saved.messages.filter((m) => m && (m.role === "user" || m.role === "assistant")
                                              && typeof m.content === "string");
      for (const m of messages) {
        if (m.pending) {  // the page was closed or reloaded while this reply streamed
          delete m.pending;
          m.stats = Object.assign({}, m.stats, { note: "interrupted" });
        }
      }
    }
    Object.assign(settings, load(SETTINGS_KEY, {}));
    els.system.value = settings.system || "";
    els.maxTokens.value = settings.maxTokens || DEFAULT_MAX_TOKENS;
    els.temperature.value = settings.temperature ?? "";
  }

  function saveSettings() {
    const max = parseInt(els.maxTokens.value, 10);
    settings = {
      system: els.system.value,
      maxTokens: Number.isFinite(max) && max > 0 ? max : DEFAULT_MAX_TOKENS,
      temperature: els.temperature.value.trim(),
    };
    store(SETTINGS_KEY, settings);
  }

  // ---- markdown rendering

  const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  const escapeHtml = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ESCAPES[c]);

  function isSafeUrl(href) {
    try {
      const url = new URL(String(href));  // absolute URLs only; parsing defeats "java\tscript:" tricks
      return url.protocol === "http:" || url.protocol === "https:";
    } catch (_) {
      return false;
    }
  }

  function highlight(code, lang, autoDetect) {
    if (typeof hljs === "undefined") return escapeHtml(code);
    try {
      const modern = parseInt(hljs.versionString || "9", 10) >= 10;
      if (lang && hljs.getLanguage(lang)) {
        return modern ? hljs.highlight(code, { language: lang, ignoreIllegals: true }).value
                      : hljs.highlight(lang, code, true).value;
      }
      if (autoDetect && code.length <= AUTO_HIGHLIGHT_LIMIT) return hljs.highlightAuto(code).value;
    } catch (_) { /* fall through to plain text */ }
    return escapeHtml(code);
  }

  let autoDetect = false;  // set while rendering a finished reply (auto-detection is slow-ish)

  // Renderer overrides. marked 4 (Debian bookworm) passes positional arguments; newer
  // versions pass one token object, so each override accepts both.
  const renderer = {
    html(html) {  // raw HTML in model output is shown, never interpreted
      return escapeHtml(typeof html === "object" ? html.text : html);
    },
    link(href, title, text) {
      if (typeof href === "object") {
        const token = href;
        ({ href, title } = token);
        text = this.parser ? this.parser.parseInline(token.tokens) : escapeHtml(token.text);
      }
      if (!isSafeUrl(href)) return text;
      const t = title ? ` title="${escapeHtml(title)}"` : "";
      return `<a href="${escapeHtml(href)}"${t} target="_blank" rel="noopener noreferrer nofollow">${text}</a>`;
    },
    image(href, title, text) {  // never fetched: shown as a link to the image
      if (typeof href === "object") ({ href, title, text } = href);
      const label = escapeHtml(text || title || "image");
      if (!isSafeUrl(href)) return label;
      return `<a class="image-link" href="${escapeHtml(href)}" target="_blank" rel="noopener noreferrer nofollow">[image: ${label}]</a>`;
    },
    code(code, infostring) {
      if (typeof code === "object") ({ text: code, lang: infostring } = code);
      const lang = String(infostring || "").trim().split(/\s+/)[0];
      const body = highlight(String(code).replace(/\n$/, ""), lang, autoDetect);
      return `<div class="code"><div class="code-head"><span class="code-lang">${escapeHtml(lang || "code")}</span>` +
             `<button type="button" class="copy">Copy</button></div>` +
             `<pre><code class="hljs${lang ? " language-" + escapeHtml(lang) : ""}">${body}</code></pre></div>\n`;
    },
  };

  const haveRenderer = typeof marked !== "undefined" && typeof DOMPurify !== "undefined"
                       && DOMPurify.isSupported !== false;
  if (haveRenderer) {
    marked.use({ renderer, gfm: true, breaks: false, headerIds: false, mangle: false });
    DOMPurify.addHook("afterSanitizeAttributes", (node) => {
      if (node.tagName === "A") {
        node.setAttribute("target", "_blank");
        node.setAttribute("rel", "noopener noreferrer nofollow");
      }
    });
  }
  const PURIFY = {
    ALLOWED_URI_REGEXP: /^https?:/i,
    ADD_ATTR: ["target"],
    FORBID_TAGS: ["img", "style", "svg", "math", "form", "iframe", "object", "embed", "video", "audio"],
    FORBID_ATTR: ["style"],
  };

  // Markdown text -> sanitized HTML. Exposed as window.splash.renderMarkdown for tests.
  function renderMarkdown(text, final = true) {
    if (!haveRenderer) return `<p class="plain">${escapeHtml(text)}</p>`;
    autoDetect = final;
    try {
      return DOMPurify.sanitize(marked.parse(String(text ?? "")), PURIFY);
    } catch (_) {
      return `<p class="plain">${escapeHtml(text)}</p>`;
    } finally {
      autoDetect = false;
    }
  }

  // ---- conversation view

  function nearBottom() {
    const c = els.chat;
    return c.scrollHeight - c.scrollTop - c.clientHeight < 80;
  }
  function scrollToBottom() {
    els.chat.scrollTop = els.chat.scrollHeight;
  }

  function statsText(stats) {
    if (!stats) return "";
    const parts = [];
    if (stats.tokens != null) parts.push(`${stats.tokens} token${stats.tokens === 1 ? "" : "s"}`);
    if (stats.tps != null) parts.push(`${stats.tps.toFixed(1)} tok/s`);
    if (stats.ttft != null) parts.push(`${stats.ttft.toFixed(2)} s to first token`);
    if (stats.note) parts.push(stats.note);
    return parts.join(" · ");
  }

  function makeView(msg) {
    const root = document.createElement("article");
    root.className = `msg ${msg.role}`;
    const role = document.createElement("div");
    role.className = "role";
    role.textContent = msg.role === "user" ? "You" : (msg.model || modelId || "Assistant");
    const reasoning = document.createElement("details");
    reasoning.className = "reasoning";
    reasoning.hidden = true;
    reasoning.innerHTML = "<summary>Thinking</summary><div class=\"reasoning-body\"></div>";
    const body = document.createElement("div");
    body.className = "body";
    const footer = document.createElement("div");
    footer.className = "footer";
    const stats = document.createElement("span");
    stats.className = "stats";
    const error = document.createElement("span");
    error.className = "error";
    footer.append(stats, error);
    root.append(role, reasoning, body, footer);
    const view = { msg, root, role, reasoning, body, stats, error, footer };
    root._view = view;
    updateView(view, true);
    return view;
  }

  function updateView(view, final) {
    const { msg } = view;
    if (msg.role === "user") {
      view.body.textContent = msg.content;  // what the user typed is shown verbatim
    } else {
      view.body.innerHTML = renderMarkdown(msg.content, final);
      view.body.classList.toggle("streaming", !!msg.pending);
      if (msg.reasoning) {
        view.reasoning.hidden = false;
        view.reasoning.querySelector(".reasoning-body").textContent = msg.reasoning;
      }
    }
    view.stats.textContent = statsText(msg.stats);
    view.error.textContent = msg.error || "";
    view.footer.querySelector(".retry")?.remove();
    if (msg.error && !msg.pending && msg === messages[messages.length - 1]) {
      const retry = document.createElement("button");
      retry.type = "button";
      retry.className = "retry ghost";
      retry.textContent = "Retry";
      retry.addEventListener("click", retryLast);
      view.footer.append(retry);
    }
    view.footer.hidden = !view.stats.textContent && !view.error.textContent;
  }

  function renderAll() {
    els.messages.replaceChildren(...messages.map((m) => makeView(m).root));
    els.empty.hidden = messages.length > 0;
    scrollToBottom();
  }

  function appendView(msg) {
    const view = makeView(msg);
    els.messages.append(view.root);
    els.empty.hidden = true;
    scrollToBottom();
    return view;
  }

  function setBusy(busy) {
    els.send.hidden = busy;
    els.stop.hidden = !busy;
    document.body.classList.toggle("busy", busy);
  }

  function showKeyPanel(message) {
    els.keyPanel.hidden = false;
    els.keyPanel.querySelector("label").textContent = message || "This server needs an API key";
    els.key.focus();
  }

  // ---- talking to the server

  function headers(json) {
    const h = {};
    if (json) h["Content-Type"] = "application/json";
    if (apiKey) h["Authorization"] = `Bearer ${apiKey}`;
    return h;
  }

  async function errorMessage(res) {
    let text = "";
    try {
      text = await res.text();
      const body = JSON.parse(text);
      if (body && body.error) return String(body.error.message || body.error);
    } catch (_) { /* not JSON */ }
    return `HTTP ${res.status}${res.statusText ? " " + res.statusText : ""}${text ? ": " + text.slice(0, 200) : ""}`;
  }

  class HttpError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  async function loadModel() {
    try {
      const res = await fetch("v1/models", { headers: headers(false) });
      if (res.status === 401) {
        els.model.textContent = "API key needed";
        showKeyPanel();
        return;
      }
      if (!res.ok) throw new Error(await errorMessage(res));
      const body = await res.json();
      modelId = body?.data?.[0]?.id || null;
      els.model.textContent = modelId || "no model";
      els.model.title = modelId || "";
      for (const el of els.messages.querySelectorAll(".msg.assistant")) {
        if (el._view && !el._view.msg.model) el._view.role.textContent = modelId || "Assistant";
      }
    } catch (e) {
      els.model.textContent = "server unreachable";
      els.model.title = String(e.message || e);
    }
  }

  // Reads an SSE body, calling onEvent(data) per event; onEvent returns false to stop early.
  async function readEvents(body, onEvent) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let data = [];
    try {
      for (;;) {
        const { value, done } = await reader.read();
        buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
        const lines = buffer.split("\n");
        buffer = done ? "" : lines.pop();
        if (done) lines.push("");  // a final event without its blank line still counts
        for (let line of lines) {
          if (line.endsWith("\r")) line = line.slice(0, -1);
          if (line === "") {
            if (data.length && onEvent(data.join("\n")) === false) return;
            data = [];
          } else if (line.startsWith("data:")) {
            data.push(line.slice(line.startsWith("data: ") ? 6 : 5));
          }  // comments (":") and other fields (event:, id:, retry:) are ignored
        }
        if (done) return;
      }
    } finally {
      reader.cancel().catch(() => {});
    }
  }

  function requestMessages(upTo) {
    const out = [];
    if (settings.system.trim()) out.push({ role: "system", content: settings.system });
    for (const m of messages) {
      if (m === upTo) break;
      if (m.role === "assistant" && !m.content) continue;  // failed or empty replies are not context
      out.push({ role: m.role, content: m.content });
    }
    return out;
  }

  async function generate(msg, view) {
    const controller = new AbortController();
    inflight = { controller, msg, view };
    setBusy(true);
    msg.pending = true;
    msg.content = "";
    msg.reasoning = "";
    msg.error = "";
    msg.stats = null;
    if (modelId) {
      msg.model = modelId;
      view.role.textContent = modelId;
    }
    updateView(view, false);

    const body = {
      messages: requestMessages(msg),
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: settings.maxTokens,
    };
    if (modelId) body.model = modelId;
    const temperature = parseFloat(settings.temperature);
    if (settings.temperature !== "" && Number.isFinite(temperature)) body.temperature = temperature;

    const started = performance.now();
    let first = null;     // time of the first streamed token
    let last = null;      // time of the latest one
    let deltas = 0;       // streamed chunks with text, the token count when usage is absent
    let usage = null;
    let finish = null;
    let done = false;
    let renderTimer = null;

    // Tokens per second counts the decode phase: the tokens after the first, over the time
    // since the first arrived (the first token's latency is the prefill, shown on its own).
    const stats = (now) => {
      const tokens = usage?.completion_tokens ?? deltas;
      const s = { tokens };
      if (first !== null) {
        s.ttft = (first - started) / 1000;
        const seconds = ((now ?? last) - first) / 1000;
        if (tokens > 1 && seconds > 0) s.tps = (tokens - 1) / seconds;
      }
      return s;
    };
    const render = (final) => {
      renderTimer = null;
      const stick = nearBottom();
      updateView(view, final);
      if (stick) scrollToBottom();
      if (final || Date.now() - lastSave > SAVE_INTERVAL_MS) saveConversation();
    };
    const schedule = () => {
      if (renderTimer !== null) return;
      renderTimer = setTimeout(() => {
        msg.stats = stats(performance.now());
        render(false);
      }, RENDER_INTERVAL_MS);
    };

    let note = "";
    try {
      const res = await fetch("v1/chat/completions", {
        method: "POST", headers: headers(true), body: JSON.stringify(body), signal: controller.signal,
      });
      if (!res.ok) throw new HttpError(res.status, await errorMessage(res));
      if (!res.body) throw new Error("the response has no body");
      await readEvents(res.body, (data) => {
        if (data === "[DONE]") {
          done = true;
          return false;
        }
        let chunk;
        try {
          chunk = JSON.parse(data);
        } catch (_) {
          return true;  // not JSON: skip it
        }
        if (chunk.error) throw new Error(String(chunk.error.message || chunk.error));
        if (chunk.usage) usage = chunk.usage;
        const choice = chunk.choices?.[0];
        if (choice) {
          const delta = choice.delta || {};
          const text = typeof delta.content === "string" ? delta.content : "";
          const thought = typeof delta.reasoning_content === "string" ? delta.reasoning_content : "";
          if (text || thought) {
            last = performance.now();
            if (first === null) first = last;
            deltas++;
            msg.content += text;
            msg.reasoning += thought;
            schedule();
          }
          if (choice.finish_reason) finish = choice.finish_reason;
        }
        return true;
      });
      if (finish === "length") note = "length limit";
      else if (!done && !finish) note = "connection closed early";
    } catch (e) {
      if (e.name === "AbortError") {
        note = "stopped";
      } else if (e instanceof HttpError && e.status === 401) {
        msg.error = `Unauthorized: ${e.message}`;
        showKeyPanel(apiKey ? "The API key was refused; enter another" : "This server needs an API key");
      } else {
        msg.error = String(e.message || e);
      }
    } finally {
      if (renderTimer !== null) clearTimeout(renderTimer);
      delete msg.pending;
      inflight = null;
      setBusy(false);
      if (first !== null || note) msg.stats = Object.assign(stats(last), note ? { note } : {});
      if (!msg.content && !msg.reasoning && !msg.error && note !== "stopped") msg.error = "The model returned an empty reply.";
      render(true);
      els.input.focus();
    }
  }

  async function send(text) {
    if (inflight || !text.trim()) return;
    messages.push({ role: "user", content: text });
    appendView(messages[messages.length - 1]);
    const msg = { role: "assistant", content: "" };
    messages.push(msg);
    const view = appendView(msg);
    saveConversation();
    await generate(msg, view);
  }

  function retryLast() {
    if (inflight) return;
    const msg = messages[messages.length - 1];
    if (!msg || msg.role !== "assistant") return;
    const root = els.messages.lastElementChild;
    if (root && root._view) generate(msg, root._view);
  }

  function newChat() {
    if (inflight) inflight.controller.abort();
    messages = [];
    saveConversation();
    renderAll();
    els.input.focus();
  }

  // ---- events

  function autosize() {
    els.input.style.height = "auto";
    els.input.style.height = Math.min(els.input.scrollHeight, 240) + "px";
  }

  els.composer.addEventListener("submit", (e) => {
    e.preventDefault();
    const text = els.input.value;
    if (inflight || !text.trim()) return;
    els.input.value = "";
    autosize();
    send(text);
  });
  els.input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      els.composer.requestSubmit();
    }
  });
  els.input.addEventListener("input", autosize);
  els.stop.addEventListener("click", () => inflight?.controller.abort());
  els.newChat.addEventListener("click", newChat);
  els.settingsToggle.addEventListener("click", () => {
    els.settings.hidden = !els.settings.hidden;
    els.settingsToggle.setAttribute("aria-expanded", String(!els.settings.hidden));
  });
  for (const el of [els.system, els.maxTokens, els.temperature]) el.addEventListener("input", saveSettings);
  els.keyForm.addEventListener("submit", (e) => {
    e.preventDefault();
    apiKey = els.key.value.trim();
    store(API_KEY_KEY, apiKey || null);
    els.key.value = "";
    els.keyPanel.hidden = true;
    loadModel();
    const last = messages[messages.length - 1];
    if (last && last.role === "assistant" && last.error && !last.content) retryLast();
  });
  els.messages.addEventListener("click", async (e) => {
    const button = e.target.closest("button.copy");
    if (!button) return;
    const code = button.closest(".code")?.querySelector("code")?.textContent ?? "";
    try {
      await navigator.clipboard.writeText(code);
    } catch (_) {  // no clipboard API (plain http on another host): select-and-copy fallback
      const area = document.createElement("textarea");
      area.value = code;
      document.body.append(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
    button.textContent = "Copied";
    setTimeout(() => { button.textContent = "Copy"; }, 1200);
  });
  // A reply still streaming when the page goes away keeps everything received so far.
  window.addEventListener("pagehide", () => { if (inflight) saveConversation(); });
  window.addEventListener("storage", (e) => {  // another tab changed the conversation
    if (e.key === CONVERSATION_KEY && !inflight) {
      restore();
      renderAll();
    }
  });

  window.splash = { renderMarkdown };  // for tests and the curious

  restore();
  renderAll();
  loadModel();
})();
