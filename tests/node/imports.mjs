// Proves the pinned clients install and load: prints what each package exports.
const packages = ["ai", "@ai-sdk/openai", "@ai-sdk/anthropic", "@ag-ui/client", "@ag-ui/core"];
const exported = {};
for (const name of packages) {
  exported[name] = Object.keys(await import(name)).sort();
}
console.log(JSON.stringify(exported));
