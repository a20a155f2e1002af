// Readiness probe for infra/kafka-local.sh: succeeds once the broker at BOOTSTRAP answers a
// metadata request (DescribeCluster) with at least one broker and a controller, and lists topics.
// Retries until the deadline. Uses only kafka-clients, which is on the broker's classpath.
//
//   java -cp 'LIBS/*:CLASSES' KafkaReady 127.0.0.1:9092 60000
//
// Exit 0: ready (prints one line describing the cluster). Exit 1: not ready by the deadline.

import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.common.Node;

public class KafkaReady {
    public static void main(String[] args) throws Exception {
        String bootstrap = args.length > 0 ? args[0] : "127.0.0.1:9092";
        long timeoutMs = args.length > 1 ? Long.parseLong(args[1]) : 60_000L;
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);

        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "memstream-kafka-ready");
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "3000");
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "5000");
        props.put(AdminClientConfig.RECONNECT_BACKOFF_MS_CONFIG, "100");
        props.put(AdminClientConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
        props.put(AdminClientConfig.RETRY_BACKOFF_MS_CONFIG, "100");

        String lastError = "no attempt made";
        try (Admin admin = Admin.create(props)) {
            while (System.nanoTime() < deadline) {
                try {
                    DescribeClusterResult cluster = admin.describeCluster();
                    String clusterId = cluster.clusterId().get(5, TimeUnit.SECONDS);
                    var nodes = cluster.nodes().get(5, TimeUnit.SECONDS);
                    Node controller = cluster.controller().get(5, TimeUnit.SECONDS);
                    if (nodes.isEmpty()) {
                        lastError = "metadata lists no broker yet";
                    } else if (controller == null || controller.isEmpty()) {
                        lastError = "metadata names no controller yet";
                    } else {
                        int topics = admin.listTopics().names().get(5, TimeUnit.SECONDS).size();
                        System.out.println("ready: cluster " + clusterId + ", brokers " + nodes.size()
                                + ", " + topics + " topic(s)");
                        return;
                    }
                } catch (Exception e) {
                    Throwable cause = e.getCause() != null ? e.getCause() : e;
                    lastError = cause.getClass().getSimpleName() + ": " + cause.getMessage();
                }
                Thread.sleep(200);
            }
        }
        System.err.println("not ready after " + timeoutMs + " ms at " + bootstrap + ": " + lastError);
        System.exit(1);
    }
}
