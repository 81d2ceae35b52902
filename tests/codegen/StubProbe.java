// Uses the generated Java stubs as a client would (tests/codegen/test_generate.py compiles and runs it
// against the fresh stubs and Debian's protobuf/grpc-java jars): messages round-trip, the service
// descriptor lists every RPC, and the field_behavior annotations resolve through common-protos.
import com.agentmesh.v1.DispatcherServiceGrpc;
import com.agentmesh.v1.ErrorClass;
import com.agentmesh.v1.ErrorCode;
import com.agentmesh.v1.ErrorDetail;
import com.agentmesh.v1.FieldViolation;
import com.agentmesh.v1.StartTaskRequest;
import com.google.api.FieldBehavior;
import com.google.api.FieldBehaviorProto;
import io.grpc.MethodDescriptor;
import java.util.List;
import java.util.TreeSet;

public final class StubProbe {
  public static void main(String[] args) throws Exception {
    StartTaskRequest request =
        StartTaskRequest.newBuilder().setAgentId("probe").setGoal("Say hello").setMaxSteps(3).build();
    StartTaskRequest back = StartTaskRequest.parseFrom(request.toByteArray());
    System.out.println(
        "request " + back.getAgentId() + " max_steps=" + back.getMaxSteps() + " has_token_budget=" + back.hasTokenBudget());

    ErrorDetail detail =
        ErrorDetail.newBuilder()
            .setCode(ErrorCode.ERROR_CODE_NOT_FOUND)
            .setErrorClass(ErrorClass.ERROR_CLASS_ENGINEERING)
            .addViolations(FieldViolation.newBuilder().setPath("agent_id").setRule("exists"))
            .putMetadata("agent_id", "nope")
            .build();
    ErrorDetail decoded = ErrorDetail.parseFrom(detail.toByteString());
    System.out.println(
        "detail " + decoded.getCode() + " " + decoded.getErrorClass() + " " + decoded.getViolations(0).getPath()
            + " " + decoded.getMetadataOrThrow("agent_id"));

    TreeSet<String> methods = new TreeSet<>();
    for (MethodDescriptor<?, ?> m : DispatcherServiceGrpc.getServiceDescriptor().getMethods()) {
      methods.add(m.getFullMethodName() + " " + m.getType());
    }
    methods.forEach(m -> System.out.println("method " + m));

    List<FieldBehavior> behavior =
        StartTaskRequest.getDescriptor().findFieldByName("goal").getOptions().getExtension(FieldBehaviorProto.fieldBehavior);
    System.out.println("goal field_behavior " + behavior);
  }
}
