// An AG-UI frontend: one @ag-ui/client HttpAgent holding a conversation over several runs.
//
// Reads RUNS (a JSON list) from the environment; each run: {url, user?, tools?, toolResults?,
// forwardedProps?}. Before a run, `user` is added as a user message and `toolResults` (a map
// tool name -> content) answer the tool calls the previous run left pending, as an app answers
// a frontend tool. Prints, per run, what the library itself produced: the new messages, the
// agent's state and messages after the run, the CUSTOM events, RUN_ERROR, the pending tool call
// ids RUN_FINISHED reported, a rejected run's error, and the warnings the client printed (its
// enforcement stage warns for every field the protocol does not define).
import { HttpAgent } from "@ag-ui/client";

const runs = JSON.parse(process.env.RUNS);
const warnings = [];
const originalWarn = console.warn;
console.warn = (...args) => { warnings.push(args.map(String).join(" ")); };
console.error = () => {};  // runAgent logs a failed run before it rejects: the result says it

const agent = new HttpAgent({ url: runs[0].url, threadId: process.env.THREAD_ID || undefined });
const out = [];
let pending = [];
let counter = 0;
for (const run of runs) {
  agent.url = run.url;
  if (run.toolResults) {
    const calls = agent.messages.flatMap((m) => m.role === "assistant" ? (m.toolCalls ?? []) : []);
    for (const id of pending) {
      const call = calls.find((c) => c.id === id);
      agent.addMessage({ id: `tool-${++counter}`, role: "tool", toolCallId: id,
                         content: run.toolResults[call.function.name] });
    }
  }
  if (run.user) {
    agent.addMessage({ id: `user-${++counter}`, role: "user", content: run.user });
  }
  const seen = { custom: [], runError: null, pendingToolCallIds: null, stateEvents: 0,
                 reasoningEvents: 0 };
  const before = warnings.length;
  let result = null;
  let error = null;
  try {
    result = await agent.runAgent({ tools: run.tools ?? [], forwardedProps: run.forwardedProps },
      {
        onCustomEvent: ({ event }) => { seen.custom.push({ name: event.name, value: event.value }); },
        onRunErrorEvent: ({ event }) => { seen.runError = { message: event.message, code: event.code }; },
        onRunFinishedEvent: (params) => { seen.pendingToolCallIds = params.pendingToolCallIds ?? null; },
        onStateSnapshotEvent: () => { seen.stateEvents += 1; },
        onReasoningMessageContentEvent: () => { seen.reasoningEvents += 1; },
      });
  } catch (e) {
    error = { message: String(e.message ?? e), status: e.status ?? null };
  }
  pending = seen.pendingToolCallIds ?? [];
  out.push({
    newMessages: result ? result.newMessages : null,
    messages: structuredClone(agent.messages),
    state: structuredClone(agent.state),
    ...seen,
    error,
    warnings: warnings.slice(before),
  });
}
console.warn = originalWarn;
console.log(JSON.stringify(out));
