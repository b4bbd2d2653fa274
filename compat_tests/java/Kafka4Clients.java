// The Java kafka-clients 4.x (current generation) against the broker, for
// compat_tests/kafka/test_java4_clients.py. Prints JSON lines on stdout, one object each, with a
// "step" field; the Python test checks them.
//
// usage: Kafka4Clients BOOTSTRAP PREFIX      (topics and groups are named PREFIX-...)
//
// 1. Admin.describeFeatures (an ApiVersions round trip)                         -> {"step":"features"}
//    idempotent producers (acks=all, enable.idempotence) write 1,000 records to PREFIX-plain
//    (3 partitions), 200 with each codec none/gzip/snappy/lz4/zstd                -> {"step":"produced"}
//    Admin.describeProducers of the three partitions                              -> {"step":"producers"}
//    a plain consumer (assign + seekToBeginning, no group) reads them back        -> {"step":"read"}
// 2. group.protocol=consumer (KIP-848): two KafkaConsumers in PREFIX-cg subscribe to PREFIX-kip848
//    (4 partitions); once they hold 2 partitions each, 1,000 records are produced and consumed
//    with commitSync after each poll                                              -> {"step":"cg_assignment"}
//    Admin.describeConsumerGroups and listConsumerGroupOffsets while both run     -> {"step":"cg_describe"}
//                                                                                    {"step":"cg_offsets"}
//    what each consumer read                                                      -> {"step":"cg_consumed"}
// 3. KIP-932: Admin.incrementalAlterConfigs on ConfigResource(GROUP, PREFIX-sg) sets
//    share.auto.offset.reset=earliest (and on PREFIX-sgx), read back with describeConfigs
//                                                                                 -> {"step":"group_config"} x2
//    two KafkaShareConsumers (implicit acknowledgement) in PREFIX-sg read PREFIX-share
//    (2 partitions, 200 records); Admin.describeShareGroups while both are in       -> {"step":"share_describe"}
//    then commitSync and close                                                    -> {"step":"share_consumed"}
//    one KafkaShareConsumer in PREFIX-sgx, share.acknowledgement.mode=explicit, reads PREFIX-explicit
//    (1 partition, e-0..e-5): RELEASE e-0 on its first delivery, REJECT e-1, ACCEPT the rest and
//    e-0's redelivery, commitSync after each poll; then 3 s more of polling       -> {"step":"share_explicit"}
// 4. Admin.listShareGroupOffsets for both share groups                            -> {"step":"share_offsets"} x2
//    Admin.listGroups() (all types), those named PREFIX-*                         -> {"step":"groups"}
// Ends with {"step":"done"}. A stage that throws prints {"step":"error","stage":...,"error":...} and
// the program carries on with the next stage; it exits 1 if any stage failed.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class Kafka4Clients extends JsonLines {
    static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};

    static String describe(Throwable e) {
        if (e instanceof ExecutionException && e.getCause() != null) e = e.getCause();
        return e.getClass().getName() + ": " + e.getMessage();
    }

    // ------------------------------------------------------------------ clients

    static Properties common(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("request.timeout.ms", "15000");
        p.put("default.api.timeout.ms", "30000");
        p.put("reconnect.backoff.max.ms", "1000");
        return p;
    }

    static KafkaProducer<String, String> producer(String bootstrap, String codec) {
        Properties p = common(bootstrap);
        p.put("acks", "all");
        p.put("enable.idempotence", "true");
        p.put("compression.type", codec);
        p.put("linger.ms", "5");
        p.put("max.block.ms", "30000");
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static void createTopic(Admin admin, String topic, int partitions) throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
        long deadline = System.currentTimeMillis() + 15000;
        while (true) {
            try {
                TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                if (d.partitions().size() == partitions) return;
            } catch (ExecutionException e) {
                if (System.currentTimeMillis() > deadline) throw e;
            }
            if (System.currentTimeMillis() > deadline) throw new IllegalStateException(topic + " not visible");
            Thread.sleep(100);
        }
    }

    /** Sends value prefix-i to partition i % partitions for i in [0, count); returns partition -> offsets. */
    static Map<Integer, List<Long>> produce(KafkaProducer<String, String> producer, String topic, int partitions,
                                            String prefix, int from, int count) throws Exception {
        List<Future<RecordMetadata>> acks = new ArrayList<>();
        for (int i = from; i < from + count; i++)
            acks.add(producer.send(new ProducerRecord<>(topic, i % partitions, "k-" + i, prefix + i)));
        producer.flush();
        Map<Integer, List<Long>> offsets = new TreeMap<>();
        for (Future<RecordMetadata> f : acks) {
            RecordMetadata md = f.get();
            offsets.computeIfAbsent(md.partition(), k -> new ArrayList<>()).add(md.offset());
        }
        return offsets;
    }

    static List<Integer> partitions(Collection<TopicPartition> tps) {
        List<Integer> out = new ArrayList<>();
        for (TopicPartition tp : tps) out.add(tp.partition());
        Collections.sort(out);
        return out;
    }

    // ------------------------------------------------------------------ 1. producer, plain consumer

    static void plain(String bootstrap, Admin admin, String topic) throws Exception {
        FeatureMetadata features = admin.describeFeatures().featureMetadata().get();
        emit("features", "supported", new TreeSet<>(features.supportedFeatures().keySet()),
             "finalized", new TreeSet<>(features.finalizedFeatures().keySet()));
        createTopic(admin, topic, 3);
        Map<Integer, List<Long>> offsets = new TreeMap<>();
        for (int c = 0; c < CODECS.length; c++) {
            try (KafkaProducer<String, String> p = producer(bootstrap, CODECS[c])) {
                produce(p, topic, 3, "v-", c * 200, 200).forEach(
                    (part, os) -> offsets.computeIfAbsent(part, k -> new ArrayList<>()).addAll(os));
            }
        }
        emit("produced", "offsets", offsets);
        // idempotence on: each producer has an id and a sequence on every partition it wrote
        List<TopicPartition> written = new ArrayList<>();
        for (int i = 0; i < 3; i++) written.add(new TopicPartition(topic, i));
        Map<Integer, List<Object>> producers = new TreeMap<>();
        admin.describeProducers(written).all().get().forEach((tp, d) -> {
            List<Object> states = new ArrayList<>();
            for (ProducerState ps : d.activeProducers())
                states.add(List.of(ps.producerId(), ps.producerEpoch(), ps.lastSequence()));
            producers.put(tp.partition(), states);
        });
        emit("producers", "partitions", producers);

        Properties p = common(bootstrap);
        p.put("enable.auto.commit", "false");
        List<Object> records = new ArrayList<>();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < 3; i++) tps.add(new TopicPartition(topic, i));
            c.assign(tps);
            c.seekToBeginning(tps);
            long deadline = System.currentTimeMillis() + 30000;
            while (records.size() < 1000 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500)))
                    records.add(List.of(r.partition(), r.offset(), r.key(), r.value()));
            }
        }
        emit("read", "records", records);
    }

    // ------------------------------------------------------------------ 2. KIP-848 consumer group

    static class GroupMember implements Runnable {
        final KafkaConsumer<String, String> consumer;
        final List<String> values = Collections.synchronizedList(new ArrayList<>());
        final AtomicReference<List<Integer>> assignment = new AtomicReference<>(List.of());
        final AtomicReference<String> error = new AtomicReference<>();
        volatile boolean stop = false;

        GroupMember(String bootstrap, String group, String topic, String clientId) {
            Properties p = common(bootstrap);
            p.put("group.id", group);
            p.put("group.protocol", "consumer");
            p.put("client.id", clientId);
            p.put("enable.auto.commit", "false");
            p.put("auto.offset.reset", "earliest");
            consumer = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
            consumer.subscribe(List.of(topic));
        }

        public void run() {
            try {
                while (!stop) {
                    ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                    for (ConsumerRecord<String, String> r : records) values.add(r.value());
                    if (!records.isEmpty()) consumer.commitSync();
                    assignment.set(partitions(consumer.assignment()));
                }
            } catch (Throwable e) {
                error.set(describe(e));
            } finally {
                consumer.close(Duration.ofSeconds(10));
            }
        }
    }

    static void consumerGroup(String bootstrap, Admin admin, String topic, String group) throws Exception {
        createTopic(admin, topic, 4);
        GroupMember[] members = {new GroupMember(bootstrap, group, topic, "kip848-a"),
                                 new GroupMember(bootstrap, group, topic, "kip848-b")};
        Thread[] threads = new Thread[2];
        for (int i = 0; i < 2; i++) (threads[i] = new Thread(members[i])).start();
        try {
            long deadline = System.currentTimeMillis() + 45000;
            while (System.currentTimeMillis() < deadline && !(members[0].assignment.get().size() == 2
                   && members[1].assignment.get().size() == 2) && members[0].error.get() == null
                   && members[1].error.get() == null)
                Thread.sleep(100);
            emit("cg_assignment", "before_produce",
                 List.of(members[0].assignment.get(), members[1].assignment.get()));
            try (KafkaProducer<String, String> p = producer(bootstrap, "none")) {
                emit("cg_produced", "offsets", produce(p, topic, 4, "g-", 0, 1000));
            }
            deadline = System.currentTimeMillis() + 45000;
            while (System.currentTimeMillis() < deadline && members[0].values.size() + members[1].values.size() < 1000
                   && members[0].error.get() == null && members[1].error.get() == null)
                Thread.sleep(100);

            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            List<Object> described = new ArrayList<>();
            for (MemberDescription m : d.members())
                described.add(obj("client_id", m.clientId(), "partitions", partitions(m.assignment().topicPartitions())));
            described.sort(Comparator.comparing(Object::toString));
            emit("cg_describe", "type", String.valueOf(d.type()), "state", String.valueOf(d.groupState()),
                 "members", described);
            Map<TopicPartition, OffsetAndMetadata> committed =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            Map<Integer, Long> offsets = new TreeMap<>();
            committed.forEach((tp, om) -> offsets.put(tp.partition(), om == null ? -1 : om.offset()));
            emit("cg_offsets", "committed", offsets);
        } finally {
            for (GroupMember m : members) m.stop = true;
            for (Thread t : threads) t.join(30000);
        }
        emit("cg_consumed", "values", List.of(members[0].values, members[1].values),
             "assignments", List.of(members[0].assignment.get(), members[1].assignment.get()),
             "errors", List.of(String.valueOf(members[0].error.get()), String.valueOf(members[1].error.get())));
    }

    // ------------------------------------------------------------------ 3. KIP-932 share groups

    static void earliest(Admin admin, String group) throws Exception {
        ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
        String value = null, error = null;
        try {
            admin.incrementalAlterConfigs(Map.of(resource, List.of(new AlterConfigOp(
                new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET)))).all().get();
            // Apache Kafka applies a group config from its metadata log a moment after the alter
            // answers: read it back until it shows (10 s at most), as the share consumers need it
            long deadline = System.currentTimeMillis() + 10_000;
            do {
                ConfigEntry e = admin.describeConfigs(List.of(resource)).all().get().get(resource)
                    .get("share.auto.offset.reset");
                value = e == null ? null : e.value();
                if ("earliest".equals(value)) break;
                Thread.sleep(100);
            } while (System.currentTimeMillis() < deadline);
        } catch (ExecutionException e) {
            error = describe(e);
        }
        emit("group_config", "group", group, "value", value, "error", error);
    }

    static KafkaShareConsumer<String, String> shareConsumer(String bootstrap, String group, String topic,
                                                            String clientId, boolean explicit) {
        Properties p = common(bootstrap);
        p.put("group.id", group);
        p.put("client.id", clientId);
        p.put("share.acknowledgement.mode", explicit ? "explicit" : "implicit");
        KafkaShareConsumer<String, String> c =
            new KafkaShareConsumer<>(p, new StringDeserializer(), new StringDeserializer());
        c.subscribe(List.of(topic));
        return c;
    }

    static class ShareMember implements Runnable {
        final KafkaShareConsumer<String, String> consumer;
        final List<Object> deliveries = Collections.synchronizedList(new ArrayList<>());
        final AtomicReference<String> error = new AtomicReference<>();
        final List<String> commitErrors = Collections.synchronizedList(new ArrayList<>());
        volatile boolean stop = false;

        ShareMember(String bootstrap, String group, String topic, String clientId) {
            consumer = shareConsumer(bootstrap, group, topic, clientId, false);
        }

        public void run() {
            try {
                while (!stop) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200)))
                        deliveries.add(List.of(r.value(), r.deliveryCount().map(Short::intValue).orElse(-1)));
                }
                // implicit mode: the last poll's records are accepted by this commit
                consumer.commitSync(Duration.ofSeconds(15)).forEach(
                    (tip, e) -> e.ifPresent(x -> commitErrors.add(tip + ": " + describe(x))));
            } catch (Throwable e) {
                error.set(describe(e));
            } finally {
                consumer.close(Duration.ofSeconds(10));
            }
        }

        int size() { return deliveries.size(); }
    }

    static void shareGroup(String bootstrap, Admin admin, String topic, String group) throws Exception {
        earliest(admin, group);
        createTopic(admin, topic, 2);
        try (KafkaProducer<String, String> p = producer(bootstrap, "none")) {
            emit("share_produced", "offsets", produce(p, topic, 2, "s-", 0, 200));
        }
        ShareMember[] members = {new ShareMember(bootstrap, group, topic, "share-a"),
                                 new ShareMember(bootstrap, group, topic, "share-b")};
        Thread[] threads = new Thread[2];
        for (int i = 0; i < 2; i++) (threads[i] = new Thread(members[i])).start();
        try {
            long deadline = System.currentTimeMillis() + 45000;
            while (System.currentTimeMillis() < deadline && members[0].size() + members[1].size() < 200
                   && members[0].error.get() == null && members[1].error.get() == null)
                Thread.sleep(100);
            // with both members still in: ShareGroupDescribe (waits up to 15 s for the second to join)
            ShareGroupDescription d = null;
            for (long until = System.currentTimeMillis() + 15000; System.currentTimeMillis() < until; Thread.sleep(200)) {
                d = admin.describeShareGroups(List.of(group)).all().get().get(group);
                if (d.members().size() >= 2) break;
            }
            List<Object> described = new ArrayList<>();
            for (ShareMemberDescription m : d.members())
                described.add(obj("client_id", m.clientId(), "partitions", partitions(m.assignment().topicPartitions())));
            described.sort(Comparator.comparing(Object::toString));
            emit("share_describe", "state", String.valueOf(d.groupState()), "members", described);
            Thread.sleep(1000); // a second delivery of anything would show up here
        } finally {
            for (ShareMember m : members) m.stop = true;
            for (Thread t : threads) t.join(30000);
        }
        emit("share_consumed", "deliveries", List.of(members[0].deliveries, members[1].deliveries),
             "errors", List.of(String.valueOf(members[0].error.get()), String.valueOf(members[1].error.get())),
             "commit_errors", List.of(members[0].commitErrors, members[1].commitErrors));
    }

    static void shareExplicit(String bootstrap, Admin admin, String topic, String group) throws Exception {
        earliest(admin, group);
        createTopic(admin, topic, 1);
        try (KafkaProducer<String, String> p = producer(bootstrap, "none")) {
            produce(p, topic, 1, "e-", 0, 6);
        }
        List<Object> deliveries = new ArrayList<>();
        List<String> commitErrors = new ArrayList<>();
        Set<String> accepted = new HashSet<>();
        try (KafkaShareConsumer<String, String> c = shareConsumer(bootstrap, group, topic, "share-x", true)) {
            long deadline = System.currentTimeMillis() + 45000;
            long quietUntil = Long.MAX_VALUE;
            while (System.currentTimeMillis() < Math.min(deadline, quietUntil)) {
                ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : records) {
                    int count = r.deliveryCount().map(Short::intValue).orElse(-1);
                    AcknowledgeType ack;
                    if (r.value().equals("e-0") && count == 1) ack = AcknowledgeType.RELEASE;
                    else if (r.value().equals("e-1")) ack = AcknowledgeType.REJECT;
                    else ack = AcknowledgeType.ACCEPT;
                    if (ack == AcknowledgeType.ACCEPT) accepted.add(r.value());
                    deliveries.add(List.of(r.value(), count, ack.toString()));
                    c.acknowledge(r, ack);
                }
                if (!records.isEmpty())
                    c.commitSync(Duration.ofSeconds(15)).forEach(
                        (tip, e) -> e.ifPresent(x -> commitErrors.add(tip + ": " + describe(x))));
                // everything but e-1 accepted (e-0 on its redelivery): keep polling 3 s more, in which
                // nothing may arrive (e-1 was rejected)
                if (quietUntil == Long.MAX_VALUE && accepted.size() == 5)
                    quietUntil = System.currentTimeMillis() + 3000;
            }
        }
        emit("share_explicit", "deliveries", deliveries, "commit_errors", commitErrors);
    }

    // ------------------------------------------------------------------ 4. admin views

    static void shareOffsets(Admin admin, String group) throws Exception {
        Map<TopicPartition, SharePartitionOffsetInfo> info = admin
            .listShareGroupOffsets(Map.of(group, new ListShareGroupOffsetsSpec()))
            .partitionsToOffsetInfo(group).get();
        Map<String, Object> out = new TreeMap<>();
        info.forEach((tp, i) -> out.put(tp.topic() + ":" + tp.partition(), i == null ? null
            : obj("start", i.startOffset(), "lag", i.lag().orElse(null))));
        emit("share_offsets", "group", group, "offsets", out);
    }

    static void listGroups(Admin admin, String prefix) throws Exception {
        List<Object> out = new ArrayList<>();
        for (GroupListing g : admin.listGroups().all().get())
            if (g.groupId().startsWith(prefix + "-"))
                out.add(obj("group", g.groupId(), "type", g.type().map(GroupType::toString).orElse(null),
                            "protocol", g.protocol(), "state", g.groupState().map(Object::toString).orElse(null)));
        out.sort(Comparator.comparing(Object::toString));
        emit("groups", "groups", out);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], prefix = args[1];
        String sg = prefix + "-sg", sgx = prefix + "-sgx";
        try (Admin admin = Admin.create(common(bootstrap))) {
            stage("plain", () -> plain(bootstrap, admin, prefix + "-plain"));
            stage("consumer_group", () -> consumerGroup(bootstrap, admin, prefix + "-kip848", prefix + "-cg"));
            stage("share_group", () -> shareGroup(bootstrap, admin, prefix + "-share", sg));
            stage("share_explicit", () -> shareExplicit(bootstrap, admin, prefix + "-explicit", sgx));
            stage("share_offsets", () -> shareOffsets(admin, sg));
            stage("share_offsets", () -> shareOffsets(admin, sgx));
            stage("groups", () -> listGroups(admin, prefix));
        }
        finish();
    }
}
