// The page of tests/contract/test_connect_browser.py: streams RunTask over gRPC-Web with Connect-ES and
// writes every event, then the final status, into the DOM. Its query string names the dispatcher's
// HTTP listener (api), the token, the agent and the goal. Bundled by esbuild with the TypeScript stubs
// protoc-gen-es writes (buf.gen.yaml's TypeScript entry) into ./gen beside this file.
import { createClient } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-web";
import { DispatcherService, TaskStatus } from "./gen/agentmesh/v1/dispatcher_pb";

const params = new URLSearchParams(location.search);
const status = document.getElementById("status") as HTMLElement;
const events = document.getElementById("events") as HTMLElement;

async function main(): Promise<void> {
  const transport = createGrpcWebTransport({ baseUrl: params.get("api") ?? "" });
  const client = createClient(DispatcherService, transport);
  let last = TaskStatus.UNSPECIFIED;
  const start = { agentId: params.get("agent") ?? "", goal: params.get("goal") ?? "" };
  const headers = { authorization: `Bearer ${params.get("token") ?? ""}` };
  for await (const reply of client.runTask({ start }, { headers, timeoutMs: 60_000 })) {
    const event = reply.event;
    if (event === undefined) continue;
    last = event.status;
    const line = document.createElement("li");
    line.textContent = `${event.sequence} ${TaskStatus[event.status]} ${event.message}`;
    events.appendChild(line);
  }
  status.textContent = `final: ${TaskStatus[last]}`;
}

main()
  .catch((err: unknown) => {
    status.textContent = `error: ${String(err)}`;
  })
  .finally(() => {
    status.dataset.done = "1";
  });
