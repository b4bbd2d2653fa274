// RabbitMQ's Java stream client (com.rabbitmq:stream-client 1.x) against the broker, for
// compat_tests/stream/test_java_stream_client.py. Prints JSON lines on stdout (JsonLines), one
// object each with a "step" field; the Python test checks them. Exit code 1 if a stage failed.
//
// usage: RabbitStreamClient HOST STREAM_PORT PREFIX STAGE...   (streams are named PREFIX-...)
//
// basics    create a stream (and again: already exists), a named producer publishes 100 messages
//           with confirms, its last publishing id, a second producer of that name resends ids
//           90..99 (deduplicated) and 100..109; consumers from first, from offset 40, from next
//                                                                       -> {"step":"basics"}
// tracking  a named consumer with manual tracking stores offset 59 (storeOffset) and reads it back
//           (storedOffset); the same name again starts after it; an unknown name has no offset
//                                                                       -> {"step":"tracking"}
// sac       single active consumer: two consumers named alike, only the first gets messages; it
//           stores offset 49 and closes, the second becomes active from offset 50
//                                                                       -> {"step":"sac"}
// super     streamCreator().superStream() with 3 partitions, a producer routing on message id
//           (hash), two single-active consumers of one name split the partitions; when one closes
//           the other takes its partitions over from their stored offsets   -> {"step":"super"}
// Ends with {"step":"done"}.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import java.util.function.BooleanSupplier;

import com.rabbitmq.stream.*;

public class RabbitStreamClient extends JsonLines {
    static String prefix;
    static Environment env;

    static String n(String suffix) { return prefix + "-" + suffix; }

    static byte[] bytes(String s) { return s.getBytes(StandardCharsets.UTF_8); }

    static String text(Message m) { return new String(m.getBodyAsBinary(), StandardCharsets.UTF_8); }

    static boolean waitFor(BooleanSupplier done, long millis) throws InterruptedException {
        long end = System.currentTimeMillis() + millis;
        while (!done.getAsBoolean()) {
            if (System.currentTimeMillis() > end) return false;
            Thread.sleep(20);
        }
        return true;
    }

    /** Sends messages id-from..id-(to-1) with publishing ids from..to-1; returns the confirmation statuses. */
    static List<ConfirmationStatus> publish(Producer producer, int from, int to) throws Exception {
        List<ConfirmationStatus> statuses = Collections.synchronizedList(new ArrayList<>());
        for (int i = from; i < to; i++) {
            Message m = producer.messageBuilder().publishingId(i).properties().messageId("id-" + i).messageBuilder()
                .addData(bytes("m" + i)).build();
            producer.send(m, statuses::add);
        }
        check(waitFor(() -> statuses.size() == to - from, 15_000), "confirms for " + from + ".." + to);
        return statuses;
    }

    /** Offsets and bodies a consumer of ``stream`` from ``spec`` gets, until ``count`` or 10 s. */
    static List<List<Object>> read(String stream, OffsetSpecification spec, int count, Runnable whileOpen) throws Exception {
        List<List<Object>> got = Collections.synchronizedList(new ArrayList<>());
        Consumer c = env.consumerBuilder().stream(stream).offset(spec).noTrackingStrategy()
            .messageHandler((ctx, m) -> got.add(List.of(ctx.offset(), text(m)))).build();
        if (whileOpen != null) whileOpen.run();
        waitFor(() -> got.size() >= count, 10_000);
        Thread.sleep(200);  // anything past ``count`` would show up here
        c.close();
        synchronized (got) { return new ArrayList<>(got); }
    }

    static List<Object> offsets(List<List<Object>> got) {
        List<Object> out = new ArrayList<>();
        for (List<Object> g : got) out.add(g.get(0));
        return out;
    }

    // ------------------------------------------------------------------ stages

    static void basics() throws Exception {
        String s = n("basics");
        env.streamCreator().stream(s).maxAge(Duration.ofHours(1)).create();
        String again;
        try {
            env.streamCreator().stream(s).maxAge(Duration.ofHours(1)).create();
            again = "ok";
        } catch (StreamException e) {
            again = "code " + e.getCode();
        }
        Producer p = env.producerBuilder().stream(s).name("writer").build();
        List<ConfirmationStatus> first = publish(p, 0, 100);
        long last = p.getLastPublishingId();
        p.close();
        Producer p2 = env.producerBuilder().stream(s).name("writer").build();
        long lastAgain = p2.getLastPublishingId();
        List<ConfirmationStatus> second = publish(p2, 90, 110);
        p2.close();
        int confirmed = 0;
        for (ConfirmationStatus st : first) confirmed += st.isConfirmed() ? 1 : 0;
        for (ConfirmationStatus st : second) confirmed += st.isConfirmed() ? 1 : 0;

        List<List<Object>> all = read(s, OffsetSpecification.first(), 110, null);
        List<List<Object>> from40 = read(s, OffsetSpecification.offset(40), 70, null);
        Producer p3 = env.producerBuilder().stream(s).build();
        List<List<Object>> next = read(s, OffsetSpecification.next(), 5, () -> {
            try {
                Thread.sleep(300);  // subscribed before the new messages arrive
                for (int i = 0; i < 5; i++) p3.send(p3.messageBuilder().addData(bytes("late" + i)).build(), st -> {});
            } catch (InterruptedException e) {
                throw new RuntimeException(e);
            }
        });
        p3.close();
        List<Object> bodies = new ArrayList<>();
        for (List<Object> g : all) bodies.add(g.get(1));
        emit("basics", "create_again", again, "confirmed", confirmed, "last_publishing_id", last,
             "last_publishing_id_again", lastAgain, "first_offsets", offsets(all), "first_bodies", bodies,
             "from40_offsets", offsets(from40), "next", next, "exists", env.streamExists(s),
             "missing_exists", env.streamExists(n("missing")));
    }

    static void tracking() throws Exception {
        String s = n("tracking");
        env.streamCreator().stream(s).create();
        Producer p = env.producerBuilder().stream(s).build();
        publish(p, 0, 100);
        p.close();
        AtomicInteger seen = new AtomicInteger();
        Consumer c = env.consumerBuilder().stream(s).name("tracker").offset(OffsetSpecification.first())
            .manualTrackingStrategy().builder()
            .messageHandler((ctx, m) -> {
                seen.incrementAndGet();
                if (ctx.offset() == 59) ctx.storeOffset();
            }).build();
        check(waitFor(() -> seen.get() == 100, 10_000), "tracker read 100");
        AtomicLong stored = new AtomicLong(-1);
        waitFor(() -> {
            try {
                stored.set(c.storedOffset());
            } catch (NoOffsetException e) {
                return false;
            }
            return stored.get() == 59;
        }, 10_000);
        c.close();
        // the same name without an offset specification: the client starts after the stored offset
        List<Long> resumed = Collections.synchronizedList(new ArrayList<>());
        Consumer again = env.consumerBuilder().stream(s).name("tracker").manualTrackingStrategy().builder()
            .messageHandler((ctx, m) -> resumed.add(ctx.offset())).build();
        waitFor(() -> resumed.size() >= 40, 10_000);
        Thread.sleep(200);
        long storedAgain = again.storedOffset();
        again.close();
        String unknown;
        Consumer stranger = env.consumerBuilder().stream(s).name("stranger").offset(OffsetSpecification.next())
            .manualTrackingStrategy().builder().messageHandler((ctx, m) -> {}).build();
        try {
            unknown = "offset " + stranger.storedOffset();
        } catch (NoOffsetException e) {
            unknown = "no offset";
        }
        stranger.close();
        synchronized (resumed) {
            emit("tracking", "stored", stored.get(), "stored_again", storedAgain, "resumed_first", resumed.get(0),
                 "resumed_count", resumed.size(), "unknown", unknown);
        }
    }

    /** A consumer update listener for single active consumers: records each activation; a consumer
     * made active once it is built (a takeover) starts after its stored offset, or from the first
     * message if it has none. One made active while it is being built starts from the first message
     * without asking: storedOffset() called from the listener before build() has returned was seen
     * to answer 0 after a long wait on a loaded machine (with this broker; RabbitMQ 3.10 has no single
     * active consumer to compare), and nothing is stored yet at that point in these stages. */
    static ConsumerUpdateListener resumeFromStored(String who, List<String> events, Set<String> built) {
        return ctx -> {
            events.add(who + ":" + ctx.stream().substring(prefix.length() + 1) + ":" + ctx.isActive());
            if (!ctx.isActive()) return null;
            if (!built.contains(who)) return OffsetSpecification.first();
            try {
                return OffsetSpecification.offset(ctx.consumer().storedOffset() + 1);
            } catch (NoOffsetException e) {
                return OffsetSpecification.first();
            }
        };
    }

    static void sac() throws Exception {
        String s = n("sac");
        env.streamCreator().stream(s).create();
        Producer p = env.producerBuilder().stream(s).build();
        publish(p, 0, 100);
        p.close();
        List<String> events = Collections.synchronizedList(new ArrayList<>());
        Set<String> built = ConcurrentHashMap.newKeySet();
        List<Long> a = Collections.synchronizedList(new ArrayList<>()), b = Collections.synchronizedList(new ArrayList<>());
        Consumer ca = env.consumerBuilder().stream(s).name("app").singleActiveConsumer()
            .consumerUpdateListener(resumeFromStored("a", events, built)).manualTrackingStrategy().builder()
            .messageHandler((ctx, m) -> {
                a.add(ctx.offset());
                if (ctx.offset() == 49) ctx.storeOffset();
            }).build();
        Consumer cb = env.consumerBuilder().stream(s).name("app").singleActiveConsumer()
            .consumerUpdateListener(resumeFromStored("b", events, built)).manualTrackingStrategy().builder()
            .messageHandler((ctx, m) -> b.add(ctx.offset())).build();
        built.add("a");
        built.add("b");
        check(waitFor(() -> a.size() == 100, 20_000),
              "the active consumer read 100 (a " + a.size() + ": " + a
              + ", b " + b.size() + ", events " + events + ")");
        check(waitFor(() -> {
            try {
                return ca.storedOffset() == 49;
            } catch (NoOffsetException e) {
                return false;
            }
        }, 10_000), "offset 49 stored");
        Thread.sleep(300);
        int bBefore = b.size();
        ca.close();
        waitFor(() -> b.size() >= 50, 10_000);
        Thread.sleep(200);
        cb.close();
        synchronized (b) {
            emit("sac", "a_count", a.size(), "b_before", bBefore, "b_first", b.isEmpty() ? null : b.get(0),
                 "b_count", b.size(), "events", new ArrayList<>(events));
        }
    }

    static void superStream() throws Exception {
        String ss = n("super");
        env.streamCreator().name(ss).superStream().partitions(3).creator().create();

        // two single active consumers of one name: RabbitMQ makes consumer (partition index mod 2)
        // of the group active on each partition, so "a" gets partitions 0 and 2, "b" partition 1
        List<String> events = Collections.synchronizedList(new ArrayList<>());
        Set<String> built = ConcurrentHashMap.newKeySet();
        Map<String, Map<String, List<String>>> got = new ConcurrentHashMap<>();
        AtomicInteger total = new AtomicInteger();
        Map<String, Consumer> consumers = new LinkedHashMap<>();
        for (String who : List.of("a", "b")) {
            got.put(who, new ConcurrentHashMap<>());
            consumers.put(who, env.consumerBuilder().superStream(ss).name("ssapp").singleActiveConsumer()
                .consumerUpdateListener(resumeFromStored(who, events, built)).manualTrackingStrategy().builder()
                .messageHandler((ctx, m) -> {
                    got.get(who).computeIfAbsent(ctx.stream().substring(ss.length() + 1),
                                                 k -> Collections.synchronizedList(new ArrayList<>())).add(text(m));
                    ctx.storeOffset();
                    total.incrementAndGet();
                }).build());
            built.add(who);
        }
        check(waitFor(() -> events.contains("b:super-1:true"), 10_000), "partition 1 handed to the second consumer");

        Producer p = env.producerBuilder().superStream(ss).routing(m -> m.getProperties().getMessageIdAsString())
            .producerBuilder().build();
        List<ConfirmationStatus> sent = Collections.synchronizedList(new ArrayList<>());
        for (int i = 0; i < 90; i++) {
            Message m = p.messageBuilder().properties().messageId("id-" + i).messageBuilder().addData(bytes("s" + i)).build();
            p.send(m, sent::add);
        }
        check(waitFor(() -> sent.size() == 90, 15_000), "90 super stream confirms");
        boolean all = waitFor(() -> total.get() >= 90, 15_000);
        Thread.sleep(500);  // nothing more should come, and the last stores reach the broker
        Map<String, Object> before = obj("a", copy(got.get("a")), "b", copy(got.get("b")));

        // where each message went: the three partitions read at once until all 90 are seen
        Map<String, List<Object>> partitions = new TreeMap<>();
        AtomicInteger read = new AtomicInteger();
        List<Consumer> readers = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            List<Object> bodies = Collections.synchronizedList(new ArrayList<>());
            partitions.put(String.valueOf(i), bodies);
            readers.add(env.consumerBuilder().stream(ss + "-" + i).offset(OffsetSpecification.first()).noTrackingStrategy()
                .messageHandler((ctx, m) -> { bodies.add(text(m)); read.incrementAndGet(); }).build());
        }
        waitFor(() -> read.get() >= 90, 10_000);
        for (Consumer r : readers) r.close();

        // "a" leaves: "b" takes partitions 0 and 2 over after the offsets "a" stored
        got.get("a").clear();
        got.get("b").clear();
        consumers.get("a").close();
        check(waitFor(() -> events.contains("b:super-0:true") && events.contains("b:super-2:true"), 10_000),
              "partitions 0 and 2 handed to the remaining consumer");
        for (int i = 90; i < 120; i++) {
            Message m = p.messageBuilder().properties().messageId("id-" + i).messageBuilder().addData(bytes("s" + i)).build();
            p.send(m, sent::add);
        }
        check(waitFor(() -> sent.size() == 120, 15_000), "120 super stream confirms");
        waitFor(() -> total.get() >= 120, 10_000);
        Thread.sleep(300);
        consumers.get("b").close();
        p.close();
        int confirmed = 0;
        synchronized (sent) {
            for (ConfirmationStatus st : sent) confirmed += st.isConfirmed() ? 1 : 0;
        }
        emit("super", "confirmed", confirmed, "first_90_consumed", all, "partitions", partitions, "before", before,
             "after", obj("a", copy(got.get("a")), "b", copy(got.get("b"))), "events", new ArrayList<>(events));
    }

    static Map<String, Object> copy(Map<String, List<String>> m) {
        Map<String, Object> out = new TreeMap<>();
        for (Map.Entry<String, List<String>> e : m.entrySet()) {
            synchronized (e.getValue()) { out.put(e.getKey(), new ArrayList<>(e.getValue())); }
        }
        return out;
    }

    public static void main(String[] args) throws Exception {
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        prefix = args[2];
        // every connection to the one address given, whatever host the broker advertises
        env = Environment.builder().host(host).port(port).username("guest").password("guest")
            .addressResolver(address -> new Address(host, port)).rpcTimeout(Duration.ofSeconds(10)).build();
        Map<String, JsonLines.Stage> stages = new LinkedHashMap<>();
        stages.put("basics", RabbitStreamClient::basics);
        stages.put("tracking", RabbitStreamClient::tracking);
        stages.put("sac", RabbitStreamClient::sac);
        stages.put("super", RabbitStreamClient::superStream);
        for (String name : Arrays.copyOfRange(args, 3, args.length)) stage(name, stages.get(name));
        stage("close", () -> env.close());
        finish();
    }
}
