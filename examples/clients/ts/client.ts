// agentmesh from TypeScript with Connect-ES over gRPC, on the stubs buf.gen.yaml generates
// (protoc-gen-es into gen/ts):
//
//   node dist/examples/clients/ts/client.js run --agent AGENT --goal "..." [--task-id ID] [--disconnect-after N] [--json]
//   node dist/examples/clients/ts/client.js watch --task-id ID [--after N] [--json]
//   node dist/examples/clients/ts/client.js agents [--json]
//
// `run` streams RunTask and prints each event; when the stream breaks (or --disconnect-after N drops
// it on purpose) it resumes with WatchTask(after_sequence = the last sequence printed), so every
// event is printed once, in order. A failed call prints its typed error, our agentmesh.v1.ErrorDetail
// first (output.ts).
//
// Environment (deliberately not AGENTMESH_*: agentmesh's own configuration owns that prefix):
// AM_EXAMPLE_DISPATCHER (host:port, default 127.0.0.1:50051) and AM_EXAMPLE_TOKEN (a signed identity
// token, sent as x-agentmesh-identity; `agentmesh token --role operator` prints one).
//
// Exit codes: 0 success (task SUCCEEDED, or the call answered), 1 the task did not succeed, 2 bad
// usage, 3 a call failed (its typed error is printed).

import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  DispatcherService,
  type StartTaskRequestSchema,
  type TaskEvent,
  TaskEventKind,
  TaskStatus,
} from "../../../gen/ts/agentmesh/v1/dispatcher_pb.js";
import { Printer, statusName } from "./output.js";

const IDENTITY_HEADER = "x-agentmesh-identity";
const REQUEST_ID_HEADER = "x-request-id";
const MAX_RESUMES = 5;
const TERMINAL = new Set([TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.ABORTED, TaskStatus.CANCELLED]);
// Stream failures after which the same watch may succeed: resume instead of giving up.
const RESUMABLE = new Set([Code.Unavailable, Code.DeadlineExceeded, Code.Internal]);

class UsageError extends Error {}

type Dispatcher = Client<typeof DispatcherService>;
type Why = "ended" | "dropped" | "broken";

interface Progress {
  last: bigint;
  status: TaskStatus;
  printed: number;
}

class Session {
  // One request id for everything this invocation does: search Jaeger by tag agentmesh.request_id.
  readonly requestId = randomUUID().replace(/-/g, "");

  constructor(
    readonly stub: Dispatcher,
    readonly token: string,
    readonly timeoutMs: number,
    readonly out: Printer,
  ) {}

  options(signal?: AbortSignal) {
    const headers: Record<string, string> = { [REQUEST_ID_HEADER]: this.requestId };
    if (this.token) headers[IDENTITY_HEADER] = this.token;
    return { headers, timeoutMs: this.timeoutMs, signal };
  }

  // Prints a stream's events until it ends; dropAfter > 0 aborts it after that many (a dropped
  // connection: the task keeps running on the server).
  async consume(
    open: (signal: AbortSignal) => AsyncIterable<{ event?: TaskEvent }>,
    stream: string,
    p: Progress,
    dropAfter: number,
  ): Promise<Why> {
    const abort = new AbortController();
    try {
      for await (const reply of open(abort.signal)) {
        const ev = reply.event;
        if (!ev || ev.kind === TaskEventKind.HEARTBEAT || ev.sequence === 0n) continue;
        // A replay may overlap what was already printed; print each event once.
        if (ev.sequence <= p.last) continue;
        if (ev.sequence !== p.last + 1n) {
          this.out.info(
            { gap_after: Number(p.last), next: Number(ev.sequence) },
            `!! gap: expected sequence ${p.last + 1n}, got ${ev.sequence}`,
          );
        }
        p.last = ev.sequence;
        p.status = ev.status;
        p.printed += 1;
        this.out.event(stream, ev);
        if (dropAfter > 0 && p.printed === dropAfter) {
          abort.abort();
          return "dropped";
        }
      }
      return "ended";
    } catch (err) {
      const code = ConnectError.from(err).code;
      // Connect-ES reports a connection lost under a stream as CANCELED ("http/2 stream closed with
      // error code CANCEL"): unless this client aborted the call itself, the stream broke.
      if (RESUMABLE.has(code) || (code === Code.Canceled && !abort.signal.aborted)) return "broken";
      throw err;
    }
  }

  async run(args: Args): Promise<number> {
    if (!args.agent || !args.goal) throw new UsageError("run needs --agent and --goal");
    // A client-chosen id makes StartTask idempotent: a RunTask that broke before its first event can
    // be run again without starting the task twice.
    const taskId = args["task-id"] || `task-${randomUUID()}`;
    const start: MessageInitShape<typeof StartTaskRequestSchema> = { agentId: args.agent, goal: args.goal, taskId };
    this.out.info({ task_id: taskId, request_id: this.requestId }, `task ${taskId} request_id ${this.requestId}`);
    const p: Progress = { last: 0n, status: TaskStatus.UNSPECIFIED, printed: 0 };
    const runTask = (signal: AbortSignal) => this.stub.runTask({ start }, this.options(signal));
    let why = await this.consume(runTask, "run", p, Number(args["disconnect-after"] ?? 0));
    for (let resumes = 0; !TERMINAL.has(p.status); resumes += 1) {
      if (why === "ended" && p.status === TaskStatus.WAITING_APPROVAL) break;
      if (resumes >= MAX_RESUMES) throw new Error(`task ${taskId} still ${statusName(p.status)} after ${MAX_RESUMES} resumes`);
      if (why === "broken") await new Promise((resolve) => setTimeout(resolve, 200 * 2 ** resumes));
      if (p.last === 0n) {
        // Nothing seen yet: RunTask again (idempotent by task_id).
        this.out.resume(taskId, p.last, why, "RunTask");
        why = await this.consume(runTask, "run", p, 0);
      } else {
        this.out.resume(taskId, p.last, why, "WatchTask");
        const after = p.last;
        why = await this.consume(
          (signal) => this.stub.watchTask({ taskId, afterSequence: after }, this.options(signal)),
          "watch",
          p,
          0,
        );
      }
    }
    return this.finish(taskId);
  }

  async watch(args: Args): Promise<number> {
    const taskId = args["task-id"];
    if (!taskId) throw new UsageError("watch needs --task-id");
    const after = BigInt(args.after ?? 0);
    const p: Progress = { last: after, status: TaskStatus.UNSPECIFIED, printed: 0 };
    await this.consume((signal) => this.stub.watchTask({ taskId, afterSequence: after }, this.options(signal)), "watch", p, 0);
    return this.finish(taskId);
  }

  // Prints the task as GetTask reports it; 0 only when it SUCCEEDED.
  async finish(taskId: string): Promise<number> {
    const { task } = await this.stub.getTask({ taskId }, this.options());
    if (!task) throw new Error(`GetTask(${taskId}) answered no task`);
    this.out.task(task);
    return task.status === TaskStatus.SUCCEEDED ? 0 : 1;
  }

  async agents(): Promise<number> {
    const { agents } = await this.stub.listAgents({}, this.options());
    for (const a of agents) {
      this.out.emit({ type: "agent", agent_id: a.agentId, model: a.model, tools: a.tools }, `${a.agentId}\t${a.model}\t${a.description}`);
    }
    return 0;
  }
}

type Args = Partial<Record<"agent" | "goal" | "task-id" | "after" | "disconnect-after" | "target" | "timeout", string>> & {
  json?: boolean;
};

function parse(argv: string[]): { command: string; args: Args } {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      agent: { type: "string" },
      goal: { type: "string" },
      "task-id": { type: "string" },
      after: { type: "string" },
      "disconnect-after": { type: "string" },
      target: { type: "string" },
      timeout: { type: "string" },
      json: { type: "boolean" },
    },
  });
  const command = positionals[0] ?? "";
  if (positionals.length !== 1 || !["run", "watch", "agents"].includes(command)) {
    throw new UsageError("usage: client.js run|watch|agents [--target HOST:PORT] [--json] [options]");
  }
  for (const name of ["after", "disconnect-after", "timeout"] as const) {
    const value = values[name];
    if (value !== undefined && !/^\d+$/.test(value)) throw new UsageError(`--${name} takes a whole number, not ${JSON.stringify(value)}`);
  }
  return { command, args: values };
}

export async function main(argv: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parse(argv);
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    return 2;
  }
  const { command, args } = parsed;
  const out = new Printer(Boolean(args.json));
  const target = args.target || process.env.AM_EXAMPLE_DISPATCHER || "127.0.0.1:50051";
  const transport = createGrpcTransport({ baseUrl: `http://${target}` });
  const session = new Session(
    createClient(DispatcherService, transport),
    process.env.AM_EXAMPLE_TOKEN ?? "",
    Number(args.timeout ?? 300) * 1000,
    out,
  );
  try {
    if (command === "run") return await session.run(args);
    if (command === "watch") return await session.watch(args);
    return await session.agents();
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`${err.message}\n`);
      return 2;
    }
    if (err instanceof ConnectError) {
      // A failed call: its typed error (class, ErrorDetail) instead of a stack trace.
      out.typedError(err);
      return 3;
    }
    throw err;
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`client.js: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
