// A useChat conversation without React: the `ai` package's AbstractChat with a plain state
// holder (what @ai-sdk/react's Chat adds is only React's re-rendering) and its
// DefaultChatTransport, against GATEWAY_URL. PLAN (JSON) gives the user's turns, the tools the
// transport's body names, the route of each request and the output the client's tool returns;
// the tool runs in onToolCall (no `execute` on any server) and its output goes back
// automatically, as a useChat app does with sendAutomaticallyWhen:
// lastAssistantMessageIsCompleteWithToolCalls.
// Prints {messages, turns, requests, toolCalls}: what the library holds and sent.
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithToolCalls,
} from "ai";

class PlainState {
  constructor(messages = []) {
    this.messages = messages;
    this.status = "ready";
    this.error = undefined;
  }
  pushMessage = (m) => { this.messages = this.messages.concat(m); };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (i, m) => { this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)]; };
  snapshot = (thing) => structuredClone(thing);
}

class Chat extends AbstractChat {
  constructor(init) { super({ ...init, state: new PlainState() }); }
}

const plan = JSON.parse(process.env.PLAN);
const requests = [];
const toolCalls = [];
// the route of each request in turn (`routes`, the last one for any later request), or `route`
const routeOf = (n) => plan.routes ? plan.routes[Math.min(n, plan.routes.length - 1)] : plan.route;
const transport = new DefaultChatTransport({
  api: process.env.GATEWAY_URL + plan.route,
  body: plan.body ?? {},
  prepareSendMessagesRequest: () => ({ api: process.env.GATEWAY_URL + routeOf(requests.length) }),
  fetch: async (url, init) => { requests.push(JSON.parse(init.body)); return fetch(url, init); },
});
let chat;
chat = new Chat({
  transport,
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
  onToolCall: async ({ toolCall }) => {
    toolCalls.push(toolCall);
    const output = plan.toolOutputs?.[toolCall.toolName];
    if (output !== undefined) {
      chat.addToolOutput({ tool: toolCall.toolName, toolCallId: toolCall.toolCallId, output });
    }
  },
  onError: () => {},
});
const turns = [];
for (const text of plan.turns) {
  await chat.sendMessage({ text });
  for (let i = 0; i < 500 && chat.status !== "ready" && chat.status !== "error"; i++) {
    await new Promise((r) => setTimeout(r, 10));
  }
  turns.push({ status: chat.status, error: chat.error?.message ?? null });
  if (chat.status === "error") break;
}
console.log(JSON.stringify({ messages: chat.messages, turns, requests, toolCalls }));
