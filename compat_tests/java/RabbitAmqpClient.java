// RabbitMQ's Java AMQP 0-9-1 client (com.rabbitmq:amqp-client 5.x) against the broker, for
// compat_tests/amqp/test_java_client.py. Prints JSON lines on stdout, one object each, with a
// "step" field; the Python test checks them. The program also checks what it can itself: a stage
// whose results are not what RabbitMQ gives prints {"step":"error",...} and the exit code is 1.
//
// usage: RabbitAmqpClient HOST PORT PREFIX     (queues and exchanges are named PREFIX-...)
//
// confirms   publisher confirms: 100 messages then waitForConfirmsOrDie, 200 more tracked by an
//            async ConfirmListener                                            -> {"step":"confirms"}
// prefetch   basicQos(10) and a consumer with manual acks over those 300: the first window holds
//            10 deliveries until one is acked; never more than 10 unacked     -> {"step":"prefetch"}
// get        basic.get with and without auto-ack, message counts, an empty get -> {"step":"get"}
// requeue    basicNack(requeue) and basicReject(requeue) over get and consume: the redelivered
//            flag, then reject without requeue drops                         -> {"step":"requeue"}
// routing    direct/topic/fanout/headers exchanges bound to queues, what each queue got; a
//            mandatory message no queue takes comes back as basic.return     -> {"step":"routing"}
// arguments  x-message-ttl and x-max-length with dead-lettering (x-death headers), a 404 for a
//            passive declare of a missing queue                              -> {"step":"arguments"}
// tx         txSelect/txCommit/txRollback of publishes and of acks           -> {"step":"tx"}
// close      channel and connection close by the application                 -> {"step":"close"}
// Ends with {"step":"done"}.

import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;

import com.rabbitmq.client.*;

public class RabbitAmqpClient extends JsonLines {
    static String prefix;

    // ------------------------------------------------------------------ helpers

    static String n(String suffix) { return prefix + "-" + suffix; }

    static byte[] bytes(String s) { return s.getBytes(StandardCharsets.UTF_8); }

    static String text(byte[] b) { return new String(b, StandardCharsets.UTF_8); }

    static String declare(Channel ch, String suffix, Map<String, Object> args) throws Exception {
        // exclusive, not auto-delete: gone with the connection, kept across a consumer's cancel
        return ch.queueDeclare(n(suffix), false, true, false, args).getQueue();
    }

    /** The bodies of every message in ``queue``, taken with auto-ack basic.get. */
    static List<String> drain(Channel ch, String queue) throws Exception {
        List<String> bodies = new ArrayList<>();
        GetResponse r;
        while ((r = ch.basicGet(queue, true)) != null) bodies.add(text(r.getBody()));
        return bodies;
    }

    static GetResponse getWithin(Channel ch, String queue, long millis) throws Exception {
        long end = System.currentTimeMillis() + millis;
        while (true) {
            GetResponse r = ch.basicGet(queue, false);
            if (r != null || System.currentTimeMillis() > end) return r;
            Thread.sleep(50);
        }
    }

    // ------------------------------------------------------------------ stages

    static void confirms(Connection conn) throws Exception {
        Channel ch = conn.createChannel();
        ch.confirmSelect();
        String q = declare(ch, "work", null);
        for (int i = 0; i < 100; i++) ch.basicPublish("", q, null, bytes("m" + i));
        ch.waitForConfirmsOrDie(10_000);

        ConcurrentSkipListSet<Long> outstanding = new ConcurrentSkipListSet<>();
        AtomicInteger acked = new AtomicInteger(), nacked = new AtomicInteger();
        CountDownLatch all = new CountDownLatch(1);
        ch.addConfirmListener(new ConfirmListener() {
            void settle(long tag, boolean multiple, AtomicInteger counter) {
                Set<Long> done = multiple ? outstanding.headSet(tag, true) : Set.of(tag);
                for (Long t : new ArrayList<>(done)) {
                    if (outstanding.remove(t)) counter.incrementAndGet();
                }
                if (acked.get() + nacked.get() == 200) all.countDown();
            }
            public void handleAck(long tag, boolean multiple) { settle(tag, multiple, acked); }
            public void handleNack(long tag, boolean multiple) { settle(tag, multiple, nacked); }
        });
        long firstAsync = ch.getNextPublishSeqNo();
        for (int i = 100; i < 300; i++) {
            outstanding.add(ch.getNextPublishSeqNo());
            ch.basicPublish("", q, MessageProperties.PERSISTENT_TEXT_PLAIN, bytes("m" + i));
        }
        boolean settled = all.await(15, TimeUnit.SECONDS);
        int depth = ch.queueDeclarePassive(q).getMessageCount();
        emit("confirms", "sync", 100, "first_async_seq", firstAsync, "settled", settled, "acked", acked.get(),
             "nacked", nacked.get(), "queue_depth", depth);
        check(settled && acked.get() == 200 && depth == 300, "all 300 confirmed and queued");
        ch.close();
    }

    static void prefetch(Connection conn) throws Exception {
        Channel ch = conn.createChannel();
        ch.basicQos(10);
        String q = n("work");
        BlockingQueue<Envelope> deliveries = new LinkedBlockingQueue<>();
        AtomicInteger delivered = new AtomicInteger(), ackedCount = new AtomicInteger(), maxUnacked = new AtomicInteger();
        List<String> bodies = Collections.synchronizedList(new ArrayList<>());
        String tag = ch.basicConsume(q, false, new DefaultConsumer(ch) {
            @Override
            public void handleDelivery(String consumerTag, Envelope env, AMQP.BasicProperties props, byte[] body) {
                bodies.add(text(body));
                int unacked = delivered.incrementAndGet() - ackedCount.get();
                maxUnacked.accumulateAndGet(unacked, Math::max);
                deliveries.add(env);
            }
        });
        Thread.sleep(700);  // the broker would have sent more by now if it ignored the window
        int firstWindow = deliveries.size();
        int received = 0;
        while (received < 300) {
            Envelope env = deliveries.poll(10, TimeUnit.SECONDS);
            if (env == null) break;
            received++;
            ackedCount.incrementAndGet();  // counted before the ack leaves, so never over-counts unacked
            ch.basicAck(env.getDeliveryTag(), false);
        }
        ch.basicCancel(tag);
        boolean inOrder = true;
        synchronized (bodies) {
            for (int i = 0; i < bodies.size(); i++) inOrder &= bodies.get(i).equals("m" + i);
        }
        int left = ch.queueDeclarePassive(q).getMessageCount();
        emit("prefetch", "first_window", firstWindow, "max_unacked", maxUnacked.get(), "received", received,
             "in_order", inOrder, "left", left);
        check(firstWindow == 10 && maxUnacked.get() <= 10 && received == 300 && inOrder && left == 0,
              "prefetch 10 respected and all 300 read in order");
        ch.close();
    }

    static void get(Connection conn) throws Exception {
        Channel ch = conn.createChannel();
        String q = declare(ch, "get", null);
        for (int i = 0; i < 3; i++) {
            AMQP.BasicProperties p = new AMQP.BasicProperties.Builder()
                .contentType("text/plain").messageId("id-" + i).headers(Map.of("n", i)).build();
            ch.basicPublish("", q, p, bytes("g" + i));
        }
        GetResponse first = getWithin(ch, q, 5000);
        ch.basicAck(first.getEnvelope().getDeliveryTag(), false);
        GetResponse second = ch.basicGet(q, true);
        GetResponse third = ch.basicGet(q, true);
        GetResponse none = ch.basicGet(q, true);
        emit("get", "bodies", List.of(text(first.getBody()), text(second.getBody()), text(third.getBody())),
             "counts", List.of(first.getMessageCount(), second.getMessageCount(), third.getMessageCount()),
             "message_id", first.getProps().getMessageId(), "content_type", first.getProps().getContentType(),
             "header_n", String.valueOf(third.getProps().getHeaders().get("n")),
             "routing_key", first.getEnvelope().getRoutingKey(), "exchange", first.getEnvelope().getExchange(),
             "empty", none == null);
        check(none == null && first.getMessageCount() == 2 && third.getMessageCount() == 0, "get counts");
        ch.close();
    }

    static void requeue(Connection conn) throws Exception {
        Channel ch = conn.createChannel();
        String q = declare(ch, "nack", null);
        ch.basicPublish("", q, null, bytes("n0"));
        GetResponse a = getWithin(ch, q, 5000);
        ch.basicNack(a.getEnvelope().getDeliveryTag(), false, true);
        GetResponse b = getWithin(ch, q, 5000);
        ch.basicReject(b.getEnvelope().getDeliveryTag(), true);

        // the same message to a consumer: redelivered again, nacked back once more, then acked
        BlockingQueue<Object[]> seen = new LinkedBlockingQueue<>();
        String tag = ch.basicConsume(q, false, new DefaultConsumer(ch) {
            @Override
            public void handleDelivery(String consumerTag, Envelope env, AMQP.BasicProperties props, byte[] body) {
                seen.add(new Object[]{env.getDeliveryTag(), env.isRedeliver(), text(body)});
            }
        });
        Object[] c1 = seen.poll(5, TimeUnit.SECONDS);
        ch.basicNack((Long) c1[0], false, true);
        Object[] c2 = seen.poll(5, TimeUnit.SECONDS);
        ch.basicAck((Long) c2[0], false);
        ch.basicCancel(tag);

        ch.basicPublish("", q, null, bytes("n1"));
        GetResponse d = getWithin(ch, q, 5000);
        ch.basicReject(d.getEnvelope().getDeliveryTag(), false);  // no requeue, no dead-letter exchange: dropped
        GetResponse gone = ch.basicGet(q, false);
        emit("requeue", "get_redelivered", List.of(a.getEnvelope().isRedeliver(), b.getEnvelope().isRedeliver()),
             "consume_redelivered", List.of(c1[1], c2[1]), "bodies", List.of(text(a.getBody()), text(b.getBody()), c1[2], c2[2]),
             "rejected_dropped", gone == null);
        ch.close();
    }

    static void routing(Connection conn) throws Exception {
        Channel ch = conn.createChannel();
        Map<String, Object> got = new LinkedHashMap<>();
        String direct = n("direct"), topic = n("topic"), fanout = n("fanout"), headers = n("headers");
        ch.exchangeDeclare(direct, BuiltinExchangeType.DIRECT, false, true, null);
        ch.exchangeDeclare(topic, BuiltinExchangeType.TOPIC, false, true, null);
        ch.exchangeDeclare(fanout, BuiltinExchangeType.FANOUT, false, true, null);
        ch.exchangeDeclare(headers, BuiltinExchangeType.HEADERS, false, true, null);
        String[][] bindings = {
            {"d-red", direct, "red"}, {"d-green", direct, "green"}, {"d-red2", direct, "red"},
            {"t-star", topic, "a.*"}, {"t-hash", topic, "#.b"},
            {"f-1", fanout, "ignored"}, {"f-2", fanout, ""},
        };
        for (String[] b : bindings) {
            declare(ch, b[0], null);
            ch.queueBind(n(b[0]), b[1], b[2]);
        }
        declare(ch, "h-all", null);
        declare(ch, "h-any", null);
        ch.queueBind(n("h-all"), headers, "", Map.of("x-match", "all", "fmt", "pdf", "type", "report"));
        ch.queueBind(n("h-any"), headers, "", Map.of("x-match", "any", "fmt", "pdf", "type", "log"));

        BlockingQueue<String> returned = new LinkedBlockingQueue<>();
        ch.addReturnListener(r -> returned.add(r.getReplyCode() + " " + r.getReplyText() + " " + r.getRoutingKey()));
        ch.confirmSelect();
        for (String key : List.of("red", "green", "blue")) ch.basicPublish(direct, key, null, bytes(key));
        for (String key : List.of("a.x", "a.b", "c.b", "a.x.y")) ch.basicPublish(topic, key, null, bytes(key));
        ch.basicPublish(fanout, "any", null, bytes("fan"));
        List<Map<String, Object>> hs = List.of(Map.of("fmt", "pdf", "type", "report"), Map.of("fmt", "pdf"),
                                               Map.of("type", "log"), Map.of("other", "x"));
        for (int i = 0; i < hs.size(); i++) {
            ch.basicPublish(headers, "", new AMQP.BasicProperties.Builder().headers(hs.get(i)).build(), bytes("h" + i));
        }
        ch.basicPublish(direct, "nobody", true, null, bytes("unroutable"));
        ch.waitForConfirmsOrDie(10_000);
        for (String queue : List.of("d-red", "d-green", "d-red2", "t-star", "t-hash", "f-1", "f-2", "h-all", "h-any")) {
            got.put(queue, drain(ch, n(queue)));
        }
        String ret = returned.poll(5, TimeUnit.SECONDS);
        ch.exchangeDelete(direct);
        boolean deleted;
        try {
            ch.exchangeDeclarePassive(direct);
            deleted = false;
        } catch (java.io.IOException e) {
            deleted = true;
            ch = conn.createChannel();
        }
        emit("routing", "queues", got, "returned", ret, "deleted_exchange_gone", deleted);
        ch.close();
    }

    static void arguments(Connection conn) throws Exception {
        Channel ch = conn.createChannel();
        String dlx = n("dlx");
        ch.exchangeDeclare(dlx, BuiltinExchangeType.DIRECT, false, true, null);
        String dead = declare(ch, "dead", null);
        ch.queueBind(dead, dlx, "dead");
        String ttl = declare(ch, "ttl", Map.of("x-message-ttl", 200, "x-dead-letter-exchange", dlx,
                                                "x-dead-letter-routing-key", "dead"));
        String capped = declare(ch, "capped", Map.of("x-max-length", 3, "x-dead-letter-exchange", dlx,
                                                      "x-dead-letter-routing-key", "dead"));
        ch.confirmSelect();
        ch.basicPublish("", ttl, null, bytes("expires"));
        for (int i = 0; i < 5; i++) ch.basicPublish("", capped, null, bytes("c" + i));
        ch.waitForConfirmsOrDie(10_000);
        int cappedDepth = ch.queueDeclarePassive(capped).getMessageCount();
        List<String> kept = drain(ch, capped);

        // expiry happens at the queue head; give it the TTL and a margin, then look
        List<Map<String, Object>> deaths = new ArrayList<>();
        long end = System.currentTimeMillis() + 10_000;
        while (deaths.size() < 3 && System.currentTimeMillis() < end) {
            GetResponse r = ch.basicGet(dead, true);
            if (r == null) { Thread.sleep(100); continue; }
            Map<String, Object> hdrs = r.getProps().getHeaders();
            @SuppressWarnings("unchecked")
            List<Map<String, Object>> xdeath = (List<Map<String, Object>>) hdrs.get("x-death");
            Map<String, Object> first = xdeath.get(0);
            deaths.add(obj("body", text(r.getBody()), "reason", String.valueOf(first.get("reason")),
                           "queue", String.valueOf(first.get("queue")), "count", ((Number) first.get("count")).longValue(),
                           "first_death_reason", String.valueOf(hdrs.get("x-first-death-reason"))));
        }
        GetResponse stillThere = ch.basicGet(ttl, true);

        // a rejected message without requeue is dead-lettered too
        String rej = declare(ch, "rejects", Map.of("x-dead-letter-exchange", dlx, "x-dead-letter-routing-key", "dead"));
        ch.basicPublish("", rej, null, bytes("rejected"));
        ch.waitForConfirmsOrDie(10_000);
        GetResponse g = getWithin(ch, rej, 5000);
        ch.basicReject(g.getEnvelope().getDeliveryTag(), false);
        GetResponse rejDead = getWithin(ch, dead, 5000);
        @SuppressWarnings("unchecked")
        Map<String, Object> rejDeath = ((List<Map<String, Object>>) rejDead.getProps().getHeaders().get("x-death")).get(0);

        Integer replyCode = null;
        try {
            ch.queueDeclarePassive(n("missing"));
        } catch (java.io.IOException e) {
            ShutdownSignalException s = (ShutdownSignalException) e.getCause();
            replyCode = ((AMQP.Channel.Close) s.getReason()).getReplyCode();
        }
        emit("arguments", "capped_depth", cappedDepth, "capped_kept", kept, "deaths", deaths,
             "ttl_queue_empty", stillThere == null, "rejected", obj("body", text(rejDead.getBody()),
             "reason", String.valueOf(rejDeath.get("reason"))), "missing_queue_code", replyCode,
             "channel_open_after", ch.isOpen());
    }

    static void tx(Connection conn) throws Exception {
        Channel ch = conn.createChannel();
        String q = declare(ch, "tx", null);
        ch.txSelect();
        ch.basicPublish("", q, null, bytes("t0"));
        ch.basicPublish("", q, null, bytes("t1"));
        ch.txRollback();
        int afterRollback = ch.queueDeclarePassive(q).getMessageCount();
        ch.basicPublish("", q, null, bytes("t2"));
        ch.basicPublish("", q, null, bytes("t3"));
        ch.txCommit();
        int afterCommit = ch.queueDeclarePassive(q).getMessageCount();

        // an ack inside a rolled-back transaction is not applied: the message stays unacked
        // and comes back when the channel closes
        GetResponse g = getWithin(ch, q, 5000);
        ch.basicAck(g.getEnvelope().getDeliveryTag(), false);
        ch.txRollback();
        ch.close();
        Channel ch2 = conn.createChannel();
        int afterAckRollback = ch2.queueDeclarePassive(q).getMessageCount();
        ch2.txSelect();
        GetResponse h = getWithin(ch2, q, 5000);
        ch2.basicAck(h.getEnvelope().getDeliveryTag(), false);
        ch2.txCommit();
        int afterAckCommit = ch2.queueDeclarePassive(q).getMessageCount();
        List<String> rest = drain(ch2, q);
        ch2.txCommit();
        emit("tx", "after_rollback", afterRollback, "after_commit", afterCommit, "after_ack_rollback", afterAckRollback,
             "after_ack_commit", afterAckCommit, "first_get", text(g.getBody()), "redelivered", h.getEnvelope().isRedeliver(),
             "acked_body", text(h.getBody()), "rest", rest);
        ch2.close();
    }

    public static void main(String[] args) throws Exception {
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        prefix = args[2];
        ConnectionFactory f = new ConnectionFactory();
        f.setHost(host);
        f.setPort(port);
        f.setUsername("guest");
        f.setPassword("guest");
        f.setAutomaticRecoveryEnabled(false);
        f.setConnectionTimeout(10_000);
        f.setRequestedHeartbeat(10);
        Connection conn = f.newConnection("java-amqp-client");
        Map<String, Object> caps = conn.getServerProperties();
        emit("connected", "product", String.valueOf(caps.get("product")), "frame_max", conn.getFrameMax(),
             "channel_max", conn.getChannelMax(), "heartbeat", conn.getHeartbeat(),
             "capabilities", new TreeSet<>(((Map<?, ?>) caps.get("capabilities")).keySet().stream().map(String::valueOf).toList()));
        stage("confirms", () -> confirms(conn));
        stage("prefetch", () -> prefetch(conn));
        stage("get", () -> get(conn));
        stage("requeue", () -> requeue(conn));
        stage("routing", () -> routing(conn));
        stage("arguments", () -> arguments(conn));
        stage("tx", () -> tx(conn));
        stage("close", () -> {
            Channel ch = conn.createChannel();
            ch.close();
            boolean channelClosed = !ch.isOpen();
            conn.close(5_000);
            ShutdownSignalException why = conn.getCloseReason();
            emit("close", "channel_closed", channelClosed, "connection_open", conn.isOpen(),
                 "by_application", why.isInitiatedByApplication(), "hard_error", why.isHardError(),
                 "reply_code", ((AMQP.Connection.Close) why.getReason()).getReplyCode());
        });
        finish();
    }
}
