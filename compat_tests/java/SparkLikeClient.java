// Drives the Java kafka-clients library through the same calls Spark's Kafka source and sink make,
// and prints what it saw as JSON lines on stdout for compat_tests/kafka/test_java_clients.py.
//
// usage: SparkLikeClient BOOTSTRAP TOPIC GROUP RECORDS_PER_CODEC BASE_TIMESTAMP
//
// 1. AdminClient.createTopics (3 partitions)                                  -> {"step":"create"}
// 2. KafkaProducer, default settings (idempotent, acks=all), once per codec    -> {"step":"produce"}
//    (none, gzip, snappy, lz4, zstd), keys, headers, explicit timestamps
// 3. AdminClient.describeTopics + listOffsets(earliest, latest, forTimestamp),
//    isolation read_uncommitted, as Spark's KafkaOffsetReaderAdmin does       -> {"step":"describe"}, {"step":"list_offsets"}
// 4. KafkaConsumer (auto.offset.reset=none, enable.auto.commit=false):
//    assign + seekToBeginning/seekToEnd + position (available range), then
//    seek + poll from the earliest offset, as Spark's KafkaDataConsumer does  -> {"step":"range"}, {"step":"fetch"}
// 5. KafkaConsumer subscribe (group), poll everything, commitSync, committed -> {"step":"group_record"}, {"step":"committed"}
// Ends with {"step":"done"}; on an exception prints {"step":"error"} and exits 1.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class SparkLikeClient {
    static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};
    static final int PARTITIONS = 3;

    static String q(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static String hex(byte[] bytes) {
        if (bytes == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (byte x : bytes) b.append(String.format("%02x", x & 0xff));
        return b.append('"').toString();
    }

    static String headers(Iterable<Header> hs) {
        StringBuilder b = new StringBuilder("[");
        boolean first = true;
        for (Header h : hs) {
            if (!first) b.append(',');
            first = false;
            b.append('[').append(q(h.key())).append(',').append(hex(h.value())).append(']');
        }
        return b.append(']').toString();
    }

    static void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static String record(String step, ConsumerRecord<byte[], byte[]> r) {
        return "{\"step\":" + q(step) + ",\"partition\":" + r.partition() + ",\"offset\":" + r.offset()
            + ",\"timestamp\":" + r.timestamp() + ",\"timestamp_type\":" + q(r.timestampType().toString())
            + ",\"key\":" + hex(r.key()) + ",\"value\":" + hex(r.value())
            + ",\"headers\":" + headers(r.headers()) + "}";
    }

    static Properties common(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("request.timeout.ms", "15000");
        p.put("default.api.timeout.ms", "30000");
        p.put("reconnect.backoff.max.ms", "1000");
        return p;
    }

    public static void main(String[] args) throws Exception {
        try {
            run(args[0], args[1], args[2], Integer.parseInt(args[3]), Long.parseLong(args[4]));
            emit("{\"step\":\"done\"}");
            System.exit(0);
        } catch (Throwable t) {
            t.printStackTrace();
            emit("{\"step\":\"error\",\"error\":" + q(t.toString()) + "}");
            System.exit(1);
        }
    }

    static void run(String bootstrap, String topic, String group, int perCodec, long baseTs) throws Exception {
        long deadline = System.currentTimeMillis() + 90_000;
        try (Admin admin = Admin.create(common(bootstrap))) {
            // 1. topic
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all().get(30, TimeUnit.SECONDS);
            emit("{\"step\":\"create\",\"topic\":" + q(topic) + ",\"partitions\":" + PARTITIONS + "}");

            // 2. Spark's sink: a KafkaProducer with default settings (idempotent, acks=all), byte[] serde
            int index = 0;
            for (String codec : CODECS) {
                Properties pp = common(bootstrap);
                pp.put("key.serializer", ByteArraySerializer.class.getName());
                pp.put("value.serializer", ByteArraySerializer.class.getName());
                pp.put("compression.type", codec);
                pp.put("max.block.ms", "30000");
                pp.put("delivery.timeout.ms", "60000");
                try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp)) {
                    List<java.util.concurrent.Future<RecordMetadata>> futures = new ArrayList<>();
                    List<Integer> indexes = new ArrayList<>();
                    for (int i = 0; i < perCodec; i++, index++) {
                        byte[] key = ("key-" + codec + "-" + i).getBytes(StandardCharsets.UTF_8);
                        StringBuilder v = new StringBuilder();
                        for (int j = 0; j <= i % 7; j++) v.append("spark-like value ").append(codec).append(' ').append(i).append(';');
                        List<Header> hs = List.of(
                            new RecordHeader("codec", codec.getBytes(StandardCharsets.UTF_8)),
                            new RecordHeader("index", Integer.toString(index).getBytes(StandardCharsets.UTF_8)));
                        ProducerRecord<byte[], byte[]> rec = new ProducerRecord<>(topic, null, baseTs + index * 10L, key,
                            v.toString().getBytes(StandardCharsets.UTF_8), hs);
                        futures.add(producer.send(rec));
                        indexes.add(index);
                    }
                    producer.flush();
                    for (int i = 0; i < futures.size(); i++) {
                        RecordMetadata md = futures.get(i).get(60, TimeUnit.SECONDS);
                        emit("{\"step\":\"produce\",\"codec\":" + q(codec) + ",\"index\":" + indexes.get(i)
                            + ",\"partition\":" + md.partition() + ",\"offset\":" + md.offset()
                            + ",\"timestamp\":" + md.timestamp() + "}");
                    }
                }
            }

            // 3. Spark's KafkaOffsetReaderAdmin: describeTopics, then listOffsets
            TopicDescription desc = admin.describeTopics(List.of(topic)).allTopicNames().get(30, TimeUnit.SECONDS).get(topic);
            StringBuilder parts = new StringBuilder("[");
            List<TopicPartition> tps = new ArrayList<>();
            for (TopicPartitionInfo info : desc.partitions()) {
                if (parts.length() > 1) parts.append(',');
                parts.append("{\"partition\":").append(info.partition())
                    .append(",\"leader\":").append(info.leader() == null ? -1 : info.leader().id())
                    .append(",\"replicas\":").append(info.replicas().size())
                    .append(",\"isr\":").append(info.isr().size()).append('}');
                tps.add(new TopicPartition(topic, info.partition()));
            }
            emit("{\"step\":\"describe\",\"topic\":" + q(desc.name()) + ",\"internal\":" + desc.isInternal()
                + ",\"partitions\":" + parts.append(']') + "}");

            ListOffsetsOptions opts = new ListOffsetsOptions(IsolationLevel.READ_UNCOMMITTED);
            long queryTs = baseTs + (perCodec * 2L) * 10L + 5;  // between two produced timestamps
            Map<String, OffsetSpec> specs = new LinkedHashMap<>();
            specs.put("earliest", OffsetSpec.earliest());
            specs.put("latest", OffsetSpec.latest());
            specs.put("timestamp", OffsetSpec.forTimestamp(queryTs));
            specs.put("after_last", OffsetSpec.forTimestamp(baseTs + 10_000_000L));
            for (Map.Entry<String, OffsetSpec> e : specs.entrySet()) {
                Map<TopicPartition, OffsetSpec> req = new HashMap<>();
                for (TopicPartition tp : tps) req.put(tp, e.getValue());
                Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> res =
                    admin.listOffsets(req, opts).all().get(30, TimeUnit.SECONDS);
                for (TopicPartition tp : tps) {
                    ListOffsetsResult.ListOffsetsResultInfo info = res.get(tp);
                    emit("{\"step\":\"list_offsets\",\"spec\":" + q(e.getKey()) + ",\"query\":" + queryTs
                        + ",\"partition\":" + tp.partition() + ",\"offset\":" + info.offset()
                        + ",\"timestamp\":" + info.timestamp() + "}");
                }
            }
        }

        // 4. Spark's KafkaDataConsumer: assign + seek + poll, no auto commit, no offset reset
        Properties cp = common(bootstrap);
        cp.put("key.deserializer", ByteArrayDeserializer.class.getName());
        cp.put("value.deserializer", ByteArrayDeserializer.class.getName());
        cp.put("group.id", "spark-kafka-source-" + group + "-executor");
        cp.put("auto.offset.reset", "none");
        cp.put("enable.auto.commit", "false");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp)) {
            for (int p = 0; p < PARTITIONS; p++) {
                TopicPartition tp = new TopicPartition(topic, p);
                consumer.assign(List.of(tp));
                consumer.seekToBeginning(List.of(tp));
                long earliest = consumer.position(tp, Duration.ofSeconds(30));
                consumer.seekToEnd(List.of(tp));
                long latest = consumer.position(tp, Duration.ofSeconds(30));
                emit("{\"step\":\"range\",\"partition\":" + p + ",\"earliest\":" + earliest + ",\"latest\":" + latest + "}");
                long next = earliest;
                consumer.seek(tp, next);
                while (next < latest) {
                    if (System.currentTimeMillis() > deadline) throw new RuntimeException("fetch timed out at " + tp + " offset " + next);
                    ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(512));
                    for (ConsumerRecord<byte[], byte[]> r : records.records(tp)) {
                        if (r.offset() >= latest) break;
                        emit(record("fetch", r));
                        next = r.offset() + 1;
                    }
                }
            }
        }

        // 5. a group consumer: subscribe, poll all, commitSync, committed
        Properties gp = common(bootstrap);
        gp.put("key.deserializer", ByteArrayDeserializer.class.getName());
        gp.put("value.deserializer", ByteArrayDeserializer.class.getName());
        gp.put("group.id", group);
        gp.put("auto.offset.reset", "earliest");
        gp.put("enable.auto.commit", "false");
        int total = perCodec * CODECS.length;
        // its own minute: joining a group takes a rebalance, and on a loaded machine the stages
        // before may have used most of the program's deadline
        long groupDeadline = System.currentTimeMillis() + 60_000;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(gp)) {
            consumer.subscribe(List.of(topic));
            int seen = 0;
            while (seen < total) {
                if (System.currentTimeMillis() > groupDeadline) throw new RuntimeException("group consumer saw only " + seen + " of " + total);
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    emit(record("group_record", r));
                    seen++;
                }
            }
            StringBuilder assigned = new StringBuilder("[");
            for (TopicPartition tp : consumer.assignment()) {
                if (assigned.length() > 1) assigned.append(',');
                assigned.append(tp.partition());
            }
            emit("{\"step\":\"group_assignment\",\"partitions\":" + assigned.append(']') + "}");
            consumer.commitSync(Duration.ofSeconds(30));
            Set<TopicPartition> all = new HashSet<>();
            for (int p = 0; p < PARTITIONS; p++) all.add(new TopicPartition(topic, p));
            Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(all, Duration.ofSeconds(30));
            for (TopicPartition tp : all) {
                OffsetAndMetadata om = committed.get(tp);
                emit("{\"step\":\"committed\",\"partition\":" + tp.partition() + ",\"offset\":" + (om == null ? -1 : om.offset()) + "}");
            }
        }
    }
}
