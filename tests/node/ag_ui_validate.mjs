// Validates AG-UI documents with the protocol's own zod schemas (@ag-ui/core/schemas).
// Reads a JSON file named by DOCS: {"inputs": [RunAgentInput...], "events": [event...]}.
// Prints {"inputs": [issues or null per input], "events": [issues or null per event]}.
import { readFileSync } from "node:fs";
import { EventSchema, RunAgentInputSchema } from "@ag-ui/core/schemas";

const docs = JSON.parse(readFileSync(process.env.DOCS, "utf8"));
const check = (schema) => (doc) => {
  const got = schema.safeParse(doc);
  return got.success ? null : got.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`);
};
console.log(JSON.stringify({
  inputs: docs.inputs.map(check(RunAgentInputSchema)),
  events: docs.events.map(check(EventSchema)),
}));
