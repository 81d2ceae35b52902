// agentmesh from Java with grpc-java (Debian's libgrpc-java 1.41 over Netty), on the stubs buf.gen.yaml
// generates (protoc's java and grpc_java_plugin into gen/java):
//
//   build/clients/agentmesh-java-client run --agent AGENT --goal "..." [--task-id ID] [--disconnect-after N] [--json]
//   build/clients/agentmesh-java-client watch --task-id ID [--after N] [--json]
//   build/clients/agentmesh-java-client agents [--json]
//
// `run` streams RunTask and prints each event; when the stream breaks (or --disconnect-after N drops
// it on purpose) it resumes with WatchTask(after_sequence = the last sequence printed), so every
// event is printed once, in order. A failed call prints its typed error: our agentmesh.v1.ErrorDetail
// and google.rpc.ErrorInfo, decoded from the grpc-status-details-bin trailer (Output.java).
//
// Environment (deliberately not AGENTMESH_*: agentmesh's own configuration owns that prefix):
// AM_EXAMPLE_DISPATCHER (host:port, default 127.0.0.1:50051) and AM_EXAMPLE_TOKEN (a signed identity
// token, sent as x-agentmesh-identity; `agentmesh token --role operator` prints one).
//
// Exit codes: 0 success (task SUCCEEDED, or the call answered), 1 the task did not succeed, 2 bad
// usage, 3 a call failed (its typed error is printed).
package com.agentmesh.examples;

import com.agentmesh.v1.DispatcherServiceGrpc;
import com.agentmesh.v1.GetTaskRequest;
import com.agentmesh.v1.ListAgentsRequest;
import com.agentmesh.v1.ListAgentsResponse;
import com.agentmesh.v1.RunTaskRequest;
import com.agentmesh.v1.RunTaskResponse;
import com.agentmesh.v1.StartTaskRequest;
import com.agentmesh.v1.Task;
import com.agentmesh.v1.TaskEvent;
import com.agentmesh.v1.TaskEventKind;
import com.agentmesh.v1.TaskStatus;
import com.agentmesh.v1.WatchTaskRequest;
import com.agentmesh.v1.WatchTaskResponse;
import io.grpc.Context;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.MetadataUtils;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.function.Supplier;

public final class Client {
  private static final Metadata.Key<String> IDENTITY =
      Metadata.Key.of("x-agentmesh-identity", Metadata.ASCII_STRING_MARSHALLER);
  private static final Metadata.Key<String> REQUEST_ID =
      Metadata.Key.of("x-request-id", Metadata.ASCII_STRING_MARSHALLER);
  private static final int MAX_RESUMES = 5;
  private static final Set<TaskStatus> TERMINAL =
      EnumSet.of(TaskStatus.TASK_STATUS_SUCCEEDED, TaskStatus.TASK_STATUS_FAILED,
          TaskStatus.TASK_STATUS_ABORTED, TaskStatus.TASK_STATUS_CANCELLED);
  // Stream failures after which the same watch may succeed: resume instead of giving up.
  private static final Set<Status.Code> RESUMABLE =
      EnumSet.of(Status.Code.UNAVAILABLE, Status.Code.DEADLINE_EXCEEDED, Status.Code.INTERNAL);
  private static final List<String> OPTIONS =
      List.of("agent", "goal", "task-id", "after", "disconnect-after", "target", "timeout");

  static final class UsageError extends Exception {
    UsageError(String message) {
      super(message);
    }
  }

  /** Where a stream stopped: at its end, dropped by us on purpose, or broken under us. */
  enum Why { ENDED, DROPPED, BROKEN }

  static final class Progress {
    long last;
    TaskStatus status = TaskStatus.TASK_STATUS_UNSPECIFIED;
    int printed;
  }

  // One request id for everything this invocation does: search Jaeger by tag agentmesh.request_id.
  final String requestId = UUID.randomUUID().toString().replace("-", "");
  final DispatcherServiceGrpc.DispatcherServiceBlockingStub stub;
  final long timeoutSeconds;
  final Output out;

  Client(ManagedChannel channel, String token, long timeoutSeconds, Output out) {
    Metadata headers = new Metadata();
    headers.put(REQUEST_ID, requestId);
    if (!token.isEmpty()) {
      headers.put(IDENTITY, token);
    }
    this.stub = DispatcherServiceGrpc.newBlockingStub(channel)
        .withInterceptors(MetadataUtils.newAttachHeadersInterceptor(headers));
    this.timeoutSeconds = timeoutSeconds;
    this.out = out;
  }

  private DispatcherServiceGrpc.DispatcherServiceBlockingStub call() {
    return stub.withDeadlineAfter(timeoutSeconds, TimeUnit.SECONDS);
  }

  /** Prints a stream's events until it ends; dropAfter > 0 cancels it after that many (a dropped
   * connection: the task keeps running on the server). */
  Why consume(Supplier<Iterator<TaskEvent>> open, String stream, Progress p, int dropAfter) {
    Context.CancellableContext scope = Context.current().withCancellation();
    Context previous = scope.attach();
    boolean cancelledByUs = false;
    try {
      Iterator<TaskEvent> events = open.get();
      while (events.hasNext()) {
        TaskEvent ev = events.next();
        if (ev.getKind() == TaskEventKind.TASK_EVENT_KIND_HEARTBEAT || ev.getSequence() == 0) {
          continue;
        }
        // A replay may overlap what was already printed; print each event once.
        if (ev.getSequence() <= p.last) {
          continue;
        }
        if (ev.getSequence() != p.last + 1) {
          Map<String, Object> gap = new HashMap<>();
          gap.put("gap_after", p.last);
          gap.put("next", ev.getSequence());
          out.info(gap, "!! gap: expected sequence " + (p.last + 1) + ", got " + ev.getSequence());
        }
        p.last = ev.getSequence();
        p.status = ev.getStatus();
        p.printed += 1;
        out.event(stream, ev);
        if (dropAfter > 0 && p.printed == dropAfter) {
          cancelledByUs = true;
          return Why.DROPPED;
        }
      }
      return Why.ENDED;
    } catch (StatusRuntimeException err) {
      Status.Code code = err.getStatus().getCode();
      if (RESUMABLE.contains(code) || (code == Status.Code.CANCELLED && !cancelledByUs)) {
        return Why.BROKEN;
      }
      throw err;
    } finally {
      scope.detach(previous);
      scope.cancel(null); // ends the call if it is still open (a drop on purpose)
    }
  }

  int run(Map<String, String> args) throws UsageError, InterruptedException {
    String agent = args.getOrDefault("agent", "");
    String goal = args.getOrDefault("goal", "");
    if (agent.isEmpty() || goal.isEmpty()) {
      throw new UsageError("run needs --agent and --goal");
    }
    // A client-chosen id makes StartTask idempotent: a RunTask that broke before its first event can be
    // run again without starting the task twice.
    String taskId = args.getOrDefault("task-id", "task-" + UUID.randomUUID());
    StartTaskRequest start = StartTaskRequest.newBuilder().setAgentId(agent).setGoal(goal).setTaskId(taskId).build();
    Map<String, Object> info = new HashMap<>();
    info.put("task_id", taskId);
    info.put("request_id", requestId);
    out.info(info, "task " + taskId + " request_id " + requestId);
    Progress p = new Progress();
    Supplier<Iterator<TaskEvent>> runTask = () -> events(call().runTask(RunTaskRequest.newBuilder().setStart(start).build()), RunTaskResponse::getEvent);
    Why why = consume(runTask, "run", p, Integer.parseInt(args.getOrDefault("disconnect-after", "0")));
    for (int resumes = 0; !TERMINAL.contains(p.status); resumes++) {
      if (why == Why.ENDED && p.status == TaskStatus.TASK_STATUS_WAITING_APPROVAL) {
        break;
      }
      if (resumes >= MAX_RESUMES) {
        throw new IllegalStateException("task " + taskId + " still " + Output.name(p.status) + " after " + MAX_RESUMES + " resumes");
      }
      if (why == Why.BROKEN) {
        Thread.sleep(200L << resumes);
      }
      if (p.last == 0) {
        // Nothing seen yet: RunTask again (idempotent by task_id).
        out.resume(taskId, p.last, why, "RunTask");
        why = consume(runTask, "run", p, 0);
      } else {
        out.resume(taskId, p.last, why, "WatchTask");
        long after = p.last;
        why = consume(() -> events(call().watchTask(
            WatchTaskRequest.newBuilder().setTaskId(taskId).setAfterSequence(after).build()),
            WatchTaskResponse::getEvent), "watch", p, 0);
      }
    }
    return finish(taskId);
  }

  int watch(Map<String, String> args) throws UsageError {
    String taskId = args.getOrDefault("task-id", "");
    if (taskId.isEmpty()) {
      throw new UsageError("watch needs --task-id");
    }
    long after = Long.parseLong(args.getOrDefault("after", "0"));
    Progress p = new Progress();
    p.last = after;
    consume(() -> events(call().watchTask(
        WatchTaskRequest.newBuilder().setTaskId(taskId).setAfterSequence(after).build()),
        WatchTaskResponse::getEvent), "watch", p, 0);
    return finish(taskId);
  }

  /** Prints the task as GetTask reports it; 0 only when it SUCCEEDED. */
  int finish(String taskId) {
    Task task = call().getTask(GetTaskRequest.newBuilder().setTaskId(taskId).build()).getTask();
    out.task(task);
    return task.getStatus() == TaskStatus.TASK_STATUS_SUCCEEDED ? 0 : 1;
  }

  int agents() {
    ListAgentsResponse reply = call().listAgents(ListAgentsRequest.getDefaultInstance());
    reply.getAgentsList().forEach(out::agent);
    return 0;
  }

  /** A stream of replies as the stream of their events. */
  private static <R> Iterator<TaskEvent> events(Iterator<R> replies, Function<R, TaskEvent> event) {
    return new Iterator<TaskEvent>() {
      @Override
      public boolean hasNext() {
        return replies.hasNext();
      }

      @Override
      public TaskEvent next() {
        return event.apply(replies.next());
      }
    };
  }

  static Map<String, String> parse(String[] argv, List<String> positionals, boolean[] json) throws UsageError {
    Map<String, String> values = new HashMap<>();
    for (int i = 0; i < argv.length; i++) {
      String arg = argv[i];
      if (!arg.startsWith("--")) {
        positionals.add(arg);
        continue;
      }
      String name = arg.substring(2);
      String value = null;
      int eq = name.indexOf('=');
      if (eq >= 0) {
        value = name.substring(eq + 1);
        name = name.substring(0, eq);
      }
      if (name.equals("json")) {
        json[0] = true;
        continue;
      }
      if (!OPTIONS.contains(name)) {
        throw new UsageError("unknown option --" + name);
      }
      if (value == null) {
        if (i + 1 >= argv.length) {
          throw new UsageError("--" + name + " needs a value");
        }
        value = argv[++i];
      }
      values.put(name, value);
    }
    String command = positionals.isEmpty() ? "" : positionals.get(0);
    if (positionals.size() != 1 || !List.of("run", "watch", "agents").contains(command)) {
      throw new UsageError("usage: agentmesh-java-client run|watch|agents [--target HOST:PORT] [--json] [options]");
    }
    for (String name : List.of("after", "disconnect-after", "timeout")) {
      String value = values.get(name);
      if (value != null && !value.matches("\\d+")) {
        throw new UsageError("--" + name + " takes a whole number, not \"" + value + "\"");
      }
    }
    return values;
  }

  public static void main(String[] argv) {
    System.exit(run(argv));
  }

  static int run(String[] argv) {
    List<String> positionals = new java.util.ArrayList<>();
    boolean[] json = {false};
    Map<String, String> args;
    try {
      args = parse(argv, positionals, json);
    } catch (UsageError err) {
      System.err.println(err.getMessage());
      return 2;
    }
    Output out = new Output(json[0]);
    String env = System.getenv("AM_EXAMPLE_DISPATCHER");
    String target = args.getOrDefault("target", env == null || env.isEmpty() ? "127.0.0.1:50051" : env);
    String token = System.getenv().getOrDefault("AM_EXAMPLE_TOKEN", "");
    // Plaintext, as `agentmesh up` serves; .useTransportSecurity() with a trust manager for TLS.
    ManagedChannel channel = NettyChannelBuilder.forTarget(target).usePlaintext().build();
    Client client = new Client(channel, token, Long.parseLong(args.getOrDefault("timeout", "300")), out);
    try {
      switch (positionals.get(0)) {
        case "run":
          return client.run(args);
        case "watch":
          return client.watch(args);
        default:
          return client.agents();
      }
    } catch (UsageError err) {
      System.err.println(err.getMessage());
      return 2;
    } catch (StatusRuntimeException err) {
      // A failed call: its typed error (class, ErrorDetail, ErrorInfo) instead of a stack trace.
      out.typedError(err);
      return 3;
    } catch (InterruptedException | RuntimeException err) {
      System.err.println("agentmesh-java-client: " + err);
      return 1;
    } finally {
      channel.shutdownNow();
      try {
        channel.awaitTermination(5, TimeUnit.SECONDS);
      } catch (InterruptedException ignored) {
        Thread.currentThread().interrupt();
      }
    }
  }
}
