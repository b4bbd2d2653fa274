// RabbitMQ's Java AMQP 1.0 client (com.rabbitmq.client:amqp-client 1.x, the client of RabbitMQ 4)
// against the broker, for compat_tests/amqp10/test_java_client.py. Prints JSON lines on stdout, one
// object each, with a "step" field; the Python test checks them. A stage that fails prints
// {"step":"error",...} and the exit code is 1.
//
// usage: RabbitAmqp10Client HOST PORT PREFIX     (queues and exchanges are named PREFIX-...)
//
// topology  through the Management API (the /management node): a quorum queue, a topic exchange,
//           a binding between them; queueInfo of the queue                   -> {"step":"topology"}
// publish   10 messages to the exchange with a routing key the binding matches, each answered by
//           its outcome; one to a key nothing matches                         -> {"step":"publish"}
// consume   a consumer with 2 initial credits settles the 10 each way: accept, discard (the queue
//           has no dead-letter exchange: dropped), requeue (delivered again, then accepted)
//                                                                             -> {"step":"consume"}
// stream    a stream queue with 5 messages read from offset 2, then from FIRST -> {"step":"stream"}
// rpc       a Requester (Direct Reply-To: the client's default with RabbitMQ 4.2) and a Responder
//           on a request queue, 3 requests; the responder asks isRequesterAlive   -> {"step":"rpc"}
// cleanup   queues and exchange deleted through the Management API            -> {"step":"cleanup"}
// Ends with {"step":"done"}.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;

import com.rabbitmq.client.amqp.*;
import com.rabbitmq.client.amqp.impl.AmqpEnvironmentBuilder;

public class RabbitAmqp10Client extends JsonLines {
    static String prefix;

    static String n(String suffix) { return prefix + "-" + suffix; }

    static byte[] bytes(String s) { return s.getBytes(StandardCharsets.UTF_8); }

    static String text(byte[] b) { return new String(b, StandardCharsets.UTF_8); }

    static void topology(Connection conn) {
        Management m = conn.management();
        Management.QueueInfo declared = m.queue(n("orders")).type(Management.QueueType.QUORUM).declare();
        m.exchange(n("events")).type(Management.ExchangeType.TOPIC).declare();
        m.binding().sourceExchange(n("events")).destinationQueue(n("orders")).key("order.*").bind();
        Management.QueueInfo info = m.queueInfo(n("orders"));
        emit("topology", "declared_name", declared.name(), "type", String.valueOf(info.type()),
             "durable", info.durable(), "messages", info.messageCount(), "consumers", info.consumerCount());
    }

    static void publish(Connection conn) throws Exception {
        Map<String, Integer> statuses = new TreeMap<>();
        try (Publisher p = conn.publisherBuilder().exchange(n("events")).key("order.created").build()) {
            CountDownLatch settled = new CountDownLatch(10);
            for (int i = 0; i < 10; i++) {
                Message msg = p.message(bytes("order-" + i)).messageId((long) i).property("n", i);
                p.publish(msg, ctx -> {
                    synchronized (statuses) { statuses.merge(String.valueOf(ctx.status()), 1, Integer::sum); }
                    settled.countDown();
                });
            }
            check(settled.await(20, TimeUnit.SECONDS), "10 outcomes within 20 s");
        }
        CompletableFuture<Publisher.Status> unroutable = new CompletableFuture<>();
        try (Publisher p = conn.publisherBuilder().exchange(n("events")).key("nobody.listens").build()) {
            p.publish(p.message(bytes("lost")), ctx -> unroutable.complete(ctx.status()));
            emit("publish", "statuses", statuses, "unroutable", String.valueOf(unroutable.get(20, TimeUnit.SECONDS)),
                 "queue_messages", conn.management().queueInfo(n("orders")).messageCount());
        }
    }

    static void consume(Connection conn) throws Exception {
        List<String> accepted = Collections.synchronizedList(new ArrayList<>());
        List<String> discarded = Collections.synchronizedList(new ArrayList<>());
        List<String> requeued = Collections.synchronizedList(new ArrayList<>());
        Set<String> seen = ConcurrentHashMap.newKeySet();
        AtomicLong deliveryCountAfterRequeue = new AtomicLong(-1);
        CountDownLatch done = new CountDownLatch(10);
        Consumer consumer = conn.consumerBuilder().queue(n("orders")).initialCredits(2).messageHandler((ctx, msg) -> {
            String body = text(msg.body());
            int i = Integer.parseInt(body.substring("order-".length()));
            if (i % 3 == 1) {
                discarded.add(body);
                ctx.discard();
                done.countDown();
            } else if (i % 3 == 2 && seen.add(body)) {
                requeued.add(body);
                ctx.requeue();
            } else {
                if (i % 3 == 2) deliveryCountAfterRequeue.set(msg.deliveryCount());
                accepted.add(body);
                ctx.accept();
                done.countDown();
            }
        }).build();
        try {
            check(done.await(30, TimeUnit.SECONDS), "10 messages settled within 30 s");
            Thread.sleep(300);  // nothing more comes
            Collections.sort(accepted);
            Collections.sort(discarded);
            Collections.sort(requeued);
            emit("consume", "accepted", accepted, "discarded", discarded, "requeued", requeued,
                 "requeued_delivery_count", deliveryCountAfterRequeue.get(),
                 "unsettled", consumer.unsettledMessageCount(),
                 "queue_messages", conn.management().queueInfo(n("orders")).messageCount());
        } finally {
            consumer.close();
        }
    }

    static void stream(Connection conn) throws Exception {
        Management m = conn.management();
        m.queue(n("log")).type(Management.QueueType.STREAM).declare();
        try (Publisher p = conn.publisherBuilder().queue(n("log")).build()) {
            CountDownLatch settled = new CountDownLatch(5);
            for (int i = 0; i < 5; i++) p.publish(p.message(bytes("entry-" + i)), ctx -> settled.countDown());
            check(settled.await(20, TimeUnit.SECONDS), "5 stream outcomes within 20 s");
        }
        emit("stream", "from_offset_2", read(conn, n("log"), 3, b -> b.stream().offset(2L).builder()),
             "from_first", read(conn, n("log"), 5,
                                b -> b.stream().offset(ConsumerBuilder.StreamOffsetSpecification.FIRST).builder()));
    }

    interface Positioned { ConsumerBuilder at(ConsumerBuilder b); }

    static List<String> read(Connection conn, String queue, int count, Positioned where) throws Exception {
        List<String> bodies = Collections.synchronizedList(new ArrayList<>());
        List<Object> offsets = Collections.synchronizedList(new ArrayList<>());
        CountDownLatch got = new CountDownLatch(count);
        Consumer c = where.at(conn.consumerBuilder().queue(queue).initialCredits(10)).messageHandler((ctx, msg) -> {
            bodies.add(text(msg.body()));
            offsets.add(msg.annotation("x-stream-offset"));
            ctx.accept();
            got.countDown();
        }).build();
        try {
            check(got.await(20, TimeUnit.SECONDS), count + " stream messages within 20 s");
            Thread.sleep(200);
        } finally {
            c.close();
        }
        List<String> out = new ArrayList<>();
        synchronized (bodies) {
            for (int i = 0; i < bodies.size(); i++) out.add(bodies.get(i) + "@" + offsets.get(i));
        }
        return out;
    }

    static void rpc(Connection conn) throws Exception {
        String queue = n("requests");
        conn.management().queue(queue).declare();
        List<Boolean> alive = Collections.synchronizedList(new ArrayList<>());
        Set<String> replyTo = Collections.synchronizedSet(new TreeSet<>());
        Responder responder = conn.responderBuilder().requestQueue(queue).handler((ctx, request) -> {
            replyTo.add(String.valueOf(request.replyTo()));
            alive.add(ctx.isRequesterAlive(request));
            return ctx.message(bytes("re:" + text(request.body())));
        }).build();
        Requester requester = conn.requesterBuilder().requestAddress().queue(queue).requester()
            .requestTimeout(Duration.ofSeconds(20)).build();
        List<String> replies = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            Message reply = requester.publish(requester.message(bytes("q" + i))).get(20, TimeUnit.SECONDS);
            replies.add(text(reply.body()));
        }
        requester.close();
        responder.close();
        conn.management().queueDelete(queue);
        emit("rpc", "replies", replies, "requester_alive", new ArrayList<>(alive), "reply_to", new ArrayList<>(replyTo));
    }

    public static void main(String[] args) throws Exception {
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        prefix = args[2];
        Environment env = new AmqpEnvironmentBuilder().connectionSettings()
            .host(host).port(port).username("guest").password("guest").environmentBuilder().build();
        try {
            Connection conn = env.connectionBuilder().recovery().activated(false).connectionBuilder().build();
            Connection.ConnectionInfo info = conn.connectionInfo();
            emit("connected", "product", info.brokerProductName(), "version", info.brokerVersion(),
                 "node", info.brokerNode());
            stage("topology", () -> topology(conn));
            stage("publish", () -> publish(conn));
            stage("consume", () -> consume(conn));
            stage("stream", () -> stream(conn));
            stage("rpc", () -> rpc(conn));
            stage("cleanup", () -> {
                Management m = conn.management();
                m.exchangeDelete(n("events"));
                m.queueDelete(n("orders"));
                m.queueDelete(n("log"));
                emit("cleanup", "ok", true);
            });
            conn.close();
        } catch (Throwable e) {  // the client's threads would keep the JVM up: report and exit
            stage("connect", () -> { throw e; });
        } finally {
            env.close();
        }
        finish();
    }
}
