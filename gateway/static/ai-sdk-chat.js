// The demo's chat page: the AI SDK's own chat machinery (AbstractChat, as useChat runs it, and
// DefaultChatTransport) with a plain DOM view instead of React. Every request goes to the
// gateway's ai-sdk-ui route of the backend picked in the list (the routes come from
// /api/status), so the same conversation can move from one backend to another.
import { AbstractChat, DefaultChatTransport } from "./ai-sdk.js";

const DIALECT = "ai-sdk-ui";
const $ = (id) => document.getElementById(id);
const routes = new Map(); // route path -> the backend (upstream) it sends to
const answeredBy = new Map(); // assistant message id -> the backend that answered it

class ViewState {
  // What AbstractChat keeps (its ChatState), redrawn on every change.
  #status = "ready";
  #error = undefined;
  #messages = [];
  get status() { return this.#status; }
  set status(s) { this.#status = s; render(); }
  get error() { return this.#error; }
  set error(e) { this.#error = e; render(); }
  get messages() { return this.#messages; }
  set messages(m) { this.#messages = m; render(); }
  pushMessage = (m) => { this.messages = this.#messages.concat(m); };
  popMessage = () => { this.messages = this.#messages.slice(0, -1); };
  replaceMessage = (i, m) => {
    this.messages = [...this.#messages.slice(0, i), m, ...this.#messages.slice(i + 1)];
  };
  snapshot = (thing) => structuredClone(thing);
}

class Chat extends AbstractChat {
  constructor(init) { super({ ...init, state: new ViewState() }); }
}

const chat = new Chat({
  transport: new DefaultChatTransport({
    api: location.origin + "/api/ui-chat",
    prepareSendMessagesRequest: () => ({ api: location.origin + $("backend").value }),
  }),
  onFinish: ({ message }) => {
    answeredBy.set(message.id, routes.get($("backend").value));
    render();
  },
  onError: () => {},
});

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function part(p) {
  switch (p.type) {
    case "text": return el("div", "text", p.text);
    case "reasoning": return el("div", "text reasoning", p.text);
    case "source-url": {
      const a = el("a", "source", p.title ?? p.url);
      a.href = p.url;
      a.target = "_blank";
      a.rel = "noreferrer";
      return a;
    }
    case "source-document": return el("span", "source", p.title);
    case "data-followups": {
      const box = el("div", "followups", "Follow up: ");
      for (const q of p.data) {
        const b = el("button", "followup", q);
        b.type = "button";
        b.onclick = () => ask(q);
        box.append(b);
      }
      return box;
    }
    case "data-session-state": return el("div", "state", `session state: ${JSON.stringify(p.data)}`);
    case "step-start": return null;
    default:
      if (p.type === "dynamic-tool" || p.type.startsWith("tool-")) {
        const name = p.toolName ?? p.type.slice(5);
        return el("div", "tool", `tool ${name}(${JSON.stringify(p.input ?? {})}): ${p.state}`);
      }
      return null; // the parts a UI shows in its own way (files, the app's own data)
  }
}

function render() {
  const box = $("messages");
  if (!box) return;
  box.replaceChildren();
  for (const m of chat?.messages ?? []) {
    const div = el("div", `message ${m.role}`);
    const who = el("div", "role", m.role);
    const by = answeredBy.get(m.id);
    if (by) who.append(el("span", "backend", ` (${by})`));
    div.append(who);
    // the answer first, then its sources, follow-ups and state (which a RAG backend sends first)
    const sources = el("div", "sources", "Sources: ");
    const after = [];
    for (const p of m.parts) {
      const node = part(p);
      if (!node) continue;
      if (node.classList.contains("source")) sources.append(node, " ");
      else if (p.type.startsWith("data-")) after.push(node);
      else div.append(node);
    }
    if (sources.childElementCount) div.append(sources);
    div.append(...after);
    box.append(div);
  }
  const status = $("status");
  if (status && chat) {
    status.textContent = chat.error ? `error: ${chat.error.message}` : chat.status;
    status.className = chat.error ? "error" : "";
    $("send").disabled = chat.status === "submitted" || chat.status === "streaming";
  }
}

function ask(text) {
  chat.sendMessage({ text });
}

async function loadRoutes() {
  let listed = [];
  try {
    const status = await (await fetch("/api/status")).json();
    listed = status.routes.filter((r) => r.dialect === DIALECT);
  } catch {
    listed = [{ path: "/api/ui-chat", upstreams: ["the demo's backend"] }];
  }
  // the routes one per backend first (their paths name it), the dialect's own route last
  listed.sort((a, b) => b.path.length - a.path.length);
  for (const r of listed) {
    routes.set(r.path, r.upstreams.join(", "));
    const option = el("option", "", `${r.upstreams.join(", ")}  (${r.path})`);
    option.value = r.path;
    $("backend").append(option);
  }
}

$("ask").addEventListener("submit", (e) => {
  e.preventDefault();
  const q = $("question");
  ask(q.value);
  q.value = "";
});
await loadRoutes();
document.body.dataset.ready = "yes";
render();
