#!/usr/bin/env node
'use strict';
// agentmesh from Node.js with @grpc/grpc-js and @grpc/proto-loader on the repository's protos/.
//
//   node client.js run --agent AGENT --goal "..." [--task-id ID] [--max-steps N] [--token-budget N]
//                      [--disconnect-after N] [--json]
//   node client.js watch --task-id ID [--after N] [--json]
//   node client.js get --task-id ID [--json]
//   node client.js agents [--json]
//   node client.js approve --task-id ID --approval-id ID [--deny] [--reason TEXT] [--arguments-sha256 HEX]
//
// Environment: AGENTMESH_DISPATCHER (host:port, default 127.0.0.1:50051), AGENTMESH_TOKEN (a signed
// identity token, sent as x-agentmesh-identity; `agentmesh token --role operator` prints one),
// AGENTMESH_PROTOS (the protos/ folder, default ../../../protos from this file).
//
// `run` streams RunTask and prints each event; when the stream breaks (or --disconnect-after N
// drops it on purpose) it resumes with WatchTask(after_sequence = the last sequence printed), so
// every event is printed once, in order, with no gap. A task outlives any stream watching it.
//
// Exit codes: 0 success (task SUCCEEDED, or the call answered), 1 the task did not succeed (FAILED,
// ABORTED, CANCELLED, or it waits for an approval), 2 bad usage, 3 a call failed (its typed error
// is printed).

const path = require('node:path');
const crypto = require('node:crypto');
const { parseArgs } = require('node:util');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const { loadDetailTypes, typedError, formatTypedError } = require('./errors');

const IDENTITY_HEADER = 'x-agentmesh-identity';
const REQUEST_ID_HEADER = 'x-request-id';
const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'ABORTED', 'CANCELLED']);
// Stream failures after which the same watch may succeed: resume instead of giving up.
const RESUMABLE = new Set([grpc.status.UNAVAILABLE, grpc.status.DEADLINE_EXCEEDED, grpc.status.INTERNAL]);
const MAX_RESUMES = 5;

class UsageError extends Error {}

function loadDispatcher(protosRoot) {
  const definition = protoLoader.loadSync('agentmesh/v1/dispatcher.proto', {
    includeDirs: [protosRoot, path.join(protosRoot, 'third_party')], // third_party: google/api/field_behavior.proto
    keepCase: false,
    longs: Number, // sequences and token counts stay far below 2^53
    enums: String,
    defaults: true,
    oneofs: true,
  });
  return grpc.loadPackageDefinition(definition).agentmesh.v1.DispatcherService;
}

const strip = (value, prefix) => String(value || '').replace(prefix, '');
const statusName = (value) => strip(value, /^TASK_STATUS_/);
const kindName = (value) => strip(value, /^TASK_EVENT_KIND_/);

// Output: one line per fact, human-readable or (--json) one JSON object per line.
class Printer {
  constructor(json) {
    this.json = json;
  }

  emit(record, text) {
    process.stdout.write((this.json ? JSON.stringify(record) : text) + '\n');
  }

  event(stream, ev) {
    const record = {
      type: 'event',
      stream,
      task_id: ev.taskId,
      sequence: Number(ev.sequence),
      kind: kindName(ev.kind),
      status: statusName(ev.status),
      step: ev.step,
      message: ev.message,
    };
    if (ev.error && ev.error.code && ev.error.code !== 'ERROR_CODE_UNSPECIFIED') {
      record.error = { code: strip(ev.error.code, /^ERROR_CODE_/), error_class: strip(ev.error.errorClass, /^ERROR_CLASS_/) };
    }
    if (ev.pendingApproval && ev.pendingApproval.approvalId) record.approval_id = ev.pendingApproval.approvalId;
    let text = `#${record.sequence} ${record.kind} [${record.status}] step ${record.step}: ${record.message}`;
    if (record.error) text += ` (${record.error.code}, ${record.error.error_class})`;
    if (record.approval_id) text += `\n    approve with: node client.js approve --task-id ${ev.taskId} --approval-id ${record.approval_id}`;
    this.emit(record, text);
  }

  resume(taskId, after, reason, method) {
    const how = method === 'WatchTask' ? `WatchTask(after_sequence=${after})` : `${method} (same task_id)`;
    this.emit(
      { type: 'resume', task_id: taskId, after_sequence: after, reason, method },
      `-- stream ${reason}; resuming with ${how}`,
    );
  }

  task(task) {
    const record = {
      type: 'task',
      task_id: task.taskId,
      agent_id: task.agentId,
      status: statusName(task.status),
      step: task.step,
      last_sequence: Number(task.lastSequence),
      answer: task.answer,
      request_id: task.requestId,
    };
    if (task.error && task.error.code && task.error.code !== 'ERROR_CODE_UNSPECIFIED') {
      record.error = { code: strip(task.error.code, /^ERROR_CODE_/), error_class: strip(task.error.errorClass, /^ERROR_CLASS_/), message: task.error.message };
    }
    let text = `task ${record.task_id} ${record.status} after ${record.step} steps, last sequence ${record.last_sequence}`;
    if (record.answer) text += `\nanswer: ${record.answer}`;
    if (record.error) text += `\nerror: ${record.error.code} (${record.error.error_class}): ${record.error.message}`;
    this.emit(record, text);
  }

  error(typed) {
    this.emit({ type: 'error', ...typed }, formatTypedError(typed));
  }

  info(record, text) {
    this.emit({ type: 'info', ...record }, text);
  }
}

class Client {
  constructor({ target, token, protosRoot, timeoutS }) {
    const Service = loadDispatcher(protosRoot);
    this.stub = new Service(target, grpc.credentials.createInsecure());
    this.detailTypes = loadDetailTypes(protosRoot);
    this.token = token;
    this.timeoutS = timeoutS;
    // One request id for everything this invocation does: search Jaeger by tag agentmesh.request_id.
    this.requestId = crypto.randomUUID().replace(/-/g, '');
  }

  metadata() {
    const md = new grpc.Metadata();
    if (this.token) md.set(IDENTITY_HEADER, this.token);
    md.set(REQUEST_ID_HEADER, this.requestId);
    return md;
  }

  options() {
    return { deadline: new Date(Date.now() + this.timeoutS * 1000) };
  }

  unary(method, request) {
    return new Promise((resolve, reject) => {
      this.stub[method](request, this.metadata(), this.options(), (err, reply) => (err ? reject(err) : resolve(reply)));
    });
  }

  close() {
    this.stub.close();
  }
}

// Reads one event stream; returns why it stopped: 'ended', 'dropped' (by us) or 'broken'.
async function consume(call, streamName, state, printer, dropAfter) {
  try {
    for await (const reply of call) {
      const ev = reply.event;
      if (!ev || kindName(ev.kind) === 'HEARTBEAT' || Number(ev.sequence) === 0) continue;
      const seq = Number(ev.sequence);
      // A replay may overlap what was already printed; print each event once.
      if (seq <= state.last) continue;
      if (seq !== state.last + 1) {
        printer.info({ gap_after: state.last, next: seq }, `!! gap: expected sequence ${state.last + 1}, got ${seq}`);
      }
      state.last = seq;
      state.status = statusName(ev.status);
      state.printed += 1;
      printer.event(streamName, ev);
      if (dropAfter > 0 && state.printed === dropAfter) break;
    }
    if (dropAfter > 0 && state.printed === dropAfter) {
      // Simulates a dropped connection; the task keeps running on the server.
      call.on('error', () => {}); // the CANCELLED status is expected now
      call.cancel();
      return 'dropped';
    }
    return 'ended';
  } catch (err) {
    if (RESUMABLE.has(err.code)) return 'broken';
    throw err;
  }
}

async function cmdRun(client, args, printer) {
  if (!args.agent || !args.goal) throw new UsageError('run needs --agent and --goal');
  // A client-chosen id makes StartTask idempotent, so even a RunTask that broke before its first
  // event can be watched (or re-run) without starting the task twice.
  const taskId = args['task-id'] || `task-${crypto.randomUUID()}`;
  const start = { agentId: args.agent, goal: args.goal, taskId };
  // Optional overrides: left unset, the agent's own limits apply (an explicit 0 is refused).
  if (args['max-steps']) start.maxSteps = Number(args['max-steps']);
  if (args['token-budget']) start.tokenBudget = Number(args['token-budget']);
  printer.info({ task_id: taskId, request_id: client.requestId }, `task ${taskId} request_id ${client.requestId}`);
  const state = { last: 0, status: '', printed: 0 };
  const dropAfter = Number(args['disconnect-after'] || 0);
  let why = await consume(client.stub.RunTask({ start }, client.metadata(), client.options()), 'run', state, printer, dropAfter);
  for (let resumes = 0; !TERMINAL.has(state.status); resumes += 1) {
    if (why === 'ended' && state.status === 'WAITING_APPROVAL') break;
    if (resumes >= MAX_RESUMES) throw new Error(`task ${taskId} still ${state.status} after ${MAX_RESUMES} resumes`);
    if (why === 'broken') await new Promise((r) => setTimeout(r, 200 * 2 ** resumes));
    // Nothing seen yet: RunTask again (idempotent by task_id: it starts the task or finds it
    // started). Otherwise: WatchTask from the last sequence printed.
    const method = state.last === 0 ? 'RunTask' : 'WatchTask';
    printer.resume(taskId, state.last, why, method);
    const call =
      method === 'RunTask'
        ? client.stub.RunTask({ start }, client.metadata(), client.options())
        : client.stub.WatchTask({ taskId, afterSequence: state.last }, client.metadata(), client.options());
    why = await consume(call, method === 'RunTask' ? 'run' : 'watch', state, printer, 0);
  }
  const { task } = await client.unary('GetTask', { taskId });
  printer.task(task);
  return statusName(task.status) === 'SUCCEEDED' ? 0 : 1;
}

async function cmdWatch(client, args, printer) {
  const taskId = args['task-id'];
  if (!taskId) throw new UsageError('watch needs --task-id');
  const state = { last: Number(args.after || 0), status: '', printed: 0 };
  await consume(client.stub.WatchTask({ taskId, afterSequence: state.last }, client.metadata(), client.options()), 'watch', state, printer, 0);
  const { task } = await client.unary('GetTask', { taskId });
  printer.task(task);
  return statusName(task.status) === 'SUCCEEDED' ? 0 : 1;
}

async function cmdGet(client, args, printer) {
  if (!args['task-id']) throw new UsageError('get needs --task-id');
  const { task } = await client.unary('GetTask', { taskId: args['task-id'] });
  printer.task(task);
  return 0;
}

async function cmdAgents(client, args, printer) {
  const { agents } = await client.unary('ListAgents', {});
  for (const a of agents) {
    printer.emit({ type: 'agent', agent_id: a.agentId, model: a.model, tools: a.tools }, `${a.agentId}\t${a.model}\t${a.description}`);
  }
  return 0;
}

async function cmdApprove(client, args, printer) {
  if (!args['task-id'] || !args['approval-id']) throw new UsageError('approve needs --task-id and --approval-id');
  const reply = await client.unary('ResolveApproval', {
    taskId: args['task-id'],
    approvalId: args['approval-id'],
    approve: !args.deny,
    reason: args.reason || '',
    argumentsSha256: args['arguments-sha256'] || '',
  });
  if (reply.task) printer.task(reply.task);
  return 0;
}

const COMMANDS = { run: cmdRun, watch: cmdWatch, get: cmdGet, agents: cmdAgents, approve: cmdApprove };

async function main(argv) {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      agent: { type: 'string' },
      goal: { type: 'string' },
      'task-id': { type: 'string' },
      after: { type: 'string' },
      'disconnect-after': { type: 'string' },
      'max-steps': { type: 'string' },
      'token-budget': { type: 'string' },
      'approval-id': { type: 'string' },
      'arguments-sha256': { type: 'string' },
      reason: { type: 'string' },
      deny: { type: 'boolean' },
      target: { type: 'string' },
      timeout: { type: 'string' },
      json: { type: 'boolean' },
    },
  });
  const command = COMMANDS[positionals[0]];
  if (!command) throw new UsageError(`usage: client.js ${Object.keys(COMMANDS).join('|')} [options]`);
  const printer = new Printer(Boolean(values.json));
  const client = new Client({
    target: values.target || process.env.AGENTMESH_DISPATCHER || '127.0.0.1:50051',
    token: process.env.AGENTMESH_TOKEN || '',
    protosRoot: process.env.AGENTMESH_PROTOS || path.resolve(__dirname, '..', '..', '..', 'protos'),
    timeoutS: Number(values.timeout || 300),
  });
  try {
    return await command(client, values, printer);
  } catch (err) {
    if (err instanceof UsageError || typeof err.code !== 'number') throw err;
    // A failed call: print its typed error (class, google.rpc details) instead of a stack trace.
    printer.error(typedError(client.detailTypes, err));
    return 3;
  } finally {
    client.close();
  }
}

if (require.main === module) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err) => {
      process.stderr.write(`${err instanceof UsageError ? '' : 'client.js: '}${err.message}\n`);
      process.exit(err instanceof UsageError ? 2 : 1);
    },
  );
}

module.exports = { main, consume, Client, Printer };
