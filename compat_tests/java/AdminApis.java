// The Java kafka-clients Admin (3.9.1) against the broker's admin APIs, for
// compat_tests/kafka/test_admin_apis.py. Prints JSON lines on stdout.
//
// usage: AdminApis BOOTSTRAP PREFIX
//
// 1. describeTopics of PREFIX-a (3 partitions) and PREFIX-b (2), two partitions per response
//    (DescribeTopicPartitions pages with a cursor)                                  -> {"step":"describe"}
// 2. describeLogDirs of broker 0, once it holds the new topics' logs                -> {"step":"logdirs"}
// 3. electLeaders PREFERRED for PREFIX-a-0 and a partition that does not exist      -> {"step":"elect"}
// 4. alterClientQuotas, describeClientQuotas, then the quotas removed               -> {"step":"quotas"}
// 5. offsets committed by an assign()-only consumer, deleteConsumerGroupOffsets of one of
//    them, the group's remaining offsets, and a group that does not exist           -> {"step":"offset_delete"}
// 6. a producer with a 5000 B/s producer_byte_rate sends 60 KB: its throttle metric -> {"step":"throttle"}
// Ends with {"step":"done"}; on an unexpected exception prints {"step":"error"} and exits 1.

import java.util.*;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class AdminApis {
    static void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static String q(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static String error(Throwable t) {
        while (t instanceof ExecutionException && t.getCause() != null) t = t.getCause();
        return t == null ? "null" : q(t.getClass().getSimpleName());
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
        String bootstrap = args[0], prefix = args[1];
        String a = prefix + "-a", b = prefix + "-b";
        try (Admin admin = Admin.create(common(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(a, 3, (short) 1), new NewTopic(b, 2, (short) 1))).all().get();
            describe(admin, a, b);
            logDirs(admin, a, b);
            elect(admin, a);
            quotas(admin, prefix);
            offsetDelete(admin, bootstrap, prefix, a, b);
            throttle(admin, bootstrap, prefix, a);
            emit("{\"step\":\"done\"}");
        } catch (Exception e) {
            emit("{\"step\":\"error\",\"error\":" + q(e.toString()) + "}");
            e.printStackTrace();
            System.exit(1);
        }
    }

    static void describe(Admin admin, String a, String b) throws Exception {
        Map<String, TopicDescription> found = admin.describeTopics(TopicCollection.ofTopicNames(List.of(a, b)),
            new DescribeTopicsOptions().partitionSizeLimitPerResponse(2)).allTopicNames().get();
        StringBuilder out = new StringBuilder("{\"step\":\"describe\",\"topics\":{");
        String sep = "";
        for (TopicDescription d : found.values()) {
            out.append(sep).append(q(d.name())).append(":{\"id\":").append(q(d.topicId().toString()))
               .append(",\"partitions\":[");
            String psep = "";
            for (TopicPartitionInfo p : d.partitions()) {
                out.append(psep).append("[").append(p.partition()).append(",").append(p.leader().id()).append(",")
                   .append(p.isr().size()).append("]");
                psep = ",";
            }
            out.append("]}");
            sep = ",";
        }
        emit(out.append("}}").toString());
    }

    static void logDirs(Admin admin, String a, String b) throws Exception {
        // Kafka makes a new topic's logs once the broker has the controller's metadata, a moment
        // after createTopics returns: ask again (up to 30 s) until all five are there
        List<TopicPartition> made = List.of(new TopicPartition(a, 0), new TopicPartition(a, 1),
            new TopicPartition(a, 2), new TopicPartition(b, 0), new TopicPartition(b, 1));
        Map<String, LogDirDescription> dirs;
        long deadline = System.currentTimeMillis() + 30_000;
        while (true) {
            dirs = admin.describeLogDirs(List.of(0)).allDescriptions().get().get(0);
            Set<TopicPartition> seen = new HashSet<>();
            for (LogDirDescription d : dirs.values()) seen.addAll(d.replicaInfos().keySet());
            if (seen.containsAll(made) || System.currentTimeMillis() > deadline) break;
            Thread.sleep(200);
        }
        StringBuilder out = new StringBuilder("{\"step\":\"logdirs\",\"dirs\":{");
        String sep = "";
        for (Map.Entry<String, LogDirDescription> e : dirs.entrySet()) {
            LogDirDescription d = e.getValue();
            out.append(sep).append(q(e.getKey())).append(":{\"error\":").append(error(d.error()))
               .append(",\"total\":").append(d.totalBytes().orElse(-1))
               .append(",\"usable\":").append(d.usableBytes().orElse(-1)).append(",\"replicas\":{");
            String rsep = "";
            for (Map.Entry<TopicPartition, ReplicaInfo> r : d.replicaInfos().entrySet()) {
                out.append(rsep).append(q(r.getKey().toString())).append(":[").append(r.getValue().size()).append(",")
                   .append(r.getValue().offsetLag()).append(",").append(r.getValue().isFuture()).append("]");
                rsep = ",";
            }
            out.append("}}");
            sep = ",";
        }
        emit(out.append("}}").toString());
    }

    static void elect(Admin admin, String a) throws Exception {
        Set<TopicPartition> asked = Set.of(new TopicPartition(a, 0), new TopicPartition(a + "-none", 0));
        Map<TopicPartition, Optional<Throwable>> result =
            admin.electLeaders(ElectionType.PREFERRED, asked).partitions().get();
        StringBuilder out = new StringBuilder("{\"step\":\"elect\",\"results\":{");
        String sep = "";
        for (Map.Entry<TopicPartition, Optional<Throwable>> e : result.entrySet()) {
            out.append(sep).append(q(e.getKey().toString())).append(":").append(error(e.getValue().orElse(null)));
            sep = ",";
        }
        emit(out.append("}}").toString());
    }

    // Kafka applies AlterClientQuotas through its controller: a broker describes the change once
    // the metadata has reached it, so a client waits for it (up to 15 s) as any Kafka user must
    static Map<ClientQuotaEntity, Map<String, Double>> userQuotas(Admin admin, String prefix, int want)
            throws Exception {
        long deadline = System.currentTimeMillis() + 15_000;
        while (true) {
            Map<ClientQuotaEntity, Map<String, Double>> found = admin.describeClientQuotas(ClientQuotaFilter.contains(
                List.of(ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.USER, prefix + "-user")))).entities().get();
            if (found.size() == want || System.currentTimeMillis() > deadline) {
                return found;
            }
            Thread.sleep(100);
        }
    }

    static void quotas(Admin admin, String prefix) throws Exception {
        ClientQuotaEntity user = new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, prefix + "-user"));
        Map<String, String> userAndDefaultClient = new HashMap<>();
        userAndDefaultClient.put(ClientQuotaEntity.USER, prefix + "-user");
        userAndDefaultClient.put(ClientQuotaEntity.CLIENT_ID, null);
        ClientQuotaEntity both = new ClientQuotaEntity(userAndDefaultClient);
        admin.alterClientQuotas(List.of(
            new ClientQuotaAlteration(user, List.of(new ClientQuotaAlteration.Op("producer_byte_rate", 1024.0))),
            new ClientQuotaAlteration(both, List.of(new ClientQuotaAlteration.Op("request_percentage", 50.0))))).all().get();
        Map<ClientQuotaEntity, Map<String, Double>> found = userQuotas(admin, prefix, 2);
        String bad = "null";
        try {
            admin.alterClientQuotas(List.of(new ClientQuotaAlteration(user,
                List.of(new ClientQuotaAlteration.Op("no_such_quota", 1.0))))).all().get();
        } catch (ExecutionException e) {
            bad = error(e);
        }
        admin.alterClientQuotas(List.of(
            new ClientQuotaAlteration(user, List.of(new ClientQuotaAlteration.Op("producer_byte_rate", null))),
            new ClientQuotaAlteration(both, List.of(new ClientQuotaAlteration.Op("request_percentage", null))))).all().get();
        int left = userQuotas(admin, prefix, 0).size();
        StringBuilder out = new StringBuilder("{\"step\":\"quotas\",\"found\":[");
        String sep = "";
        for (Map.Entry<ClientQuotaEntity, Map<String, Double>> e : found.entrySet()) {
            out.append(sep).append("{\"user\":").append(q(e.getKey().entries().get(ClientQuotaEntity.USER)))
               .append(",\"client\":").append(e.getKey().entries().containsKey(ClientQuotaEntity.CLIENT_ID)
                   ? q(String.valueOf(e.getKey().entries().get(ClientQuotaEntity.CLIENT_ID))) : "\"-\"")
               .append(",\"values\":{");
            String vsep = "";
            for (Map.Entry<String, Double> v : e.getValue().entrySet()) {
                out.append(vsep).append(q(v.getKey())).append(":").append(v.getValue());
                vsep = ",";
            }
            out.append("}}");
            sep = ",";
        }
        emit(out.append("],\"invalid\":").append(bad).append(",\"left\":").append(left).append("}").toString());
    }

    static void offsetDelete(Admin admin, String bootstrap, String prefix, String a, String b) throws Exception {
        String group = prefix + "-group";
        Properties p = common(bootstrap);
        p.put("group.id", group);
        try (KafkaConsumer<byte[], byte[]> consumer =
                 new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.assign(List.of(new TopicPartition(a, 0), new TopicPartition(b, 0)));
            consumer.commitSync(Map.of(new TopicPartition(a, 0), new OffsetAndMetadata(0),
                                       new TopicPartition(b, 0), new OffsetAndMetadata(0)));
        }
        DeleteConsumerGroupOffsetsResult deleted =
            admin.deleteConsumerGroupOffsets(group, Set.of(new TopicPartition(a, 0)));
        String result = "null";
        try {
            deleted.partitionResult(new TopicPartition(a, 0)).get();
        } catch (ExecutionException e) {
            result = error(e);
        }
        Set<TopicPartition> left = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().keySet();
        String unknown = "null";
        try {
            admin.deleteConsumerGroupOffsets(prefix + "-no-group", Set.of(new TopicPartition(a, 0))).all().get();
        } catch (ExecutionException e) {
            unknown = error(e);
        }
        StringBuilder out = new StringBuilder("{\"step\":\"offset_delete\",\"error\":").append(result).append(",\"left\":[");
        String sep = "";
        for (TopicPartition tp : left) {
            out.append(sep).append(q(tp.toString()));
            sep = ",";
        }
        emit(out.append("],\"unknown_group\":").append(unknown).append("}").toString());
    }

    static void throttle(Admin admin, String bootstrap, String prefix, String topic) throws Exception {
        String client = prefix + "-slow";
        ClientQuotaEntity entity = new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, client));
        admin.alterClientQuotas(List.of(new ClientQuotaAlteration(entity,
            List.of(new ClientQuotaAlteration.Op("producer_byte_rate", 5000.0))))).all().get();
        Properties p = common(bootstrap);
        p.put("client.id", client);
        p.put("linger.ms", "20");
        double max = 0;
        long started = System.nanoTime();
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (int i = 0; i < 60; i++) producer.send(new ProducerRecord<>(topic, 1, null, new byte[1000]));
            producer.flush();
            for (Map.Entry<MetricName, ? extends Metric> m : producer.metrics().entrySet()) {
                if (m.getKey().name().equals("produce-throttle-time-max") && m.getKey().group().equals("producer-metrics")) {
                    Object v = m.getValue().metricValue();
                    if (v instanceof Double && !((Double) v).isNaN()) max = Math.max(max, (Double) v);
                }
            }
        } finally {
            admin.alterClientQuotas(List.of(new ClientQuotaAlteration(entity,
                List.of(new ClientQuotaAlteration.Op("producer_byte_rate", null))))).all().get();
        }
        long ms = (System.nanoTime() - started) / 1_000_000;
        emit("{\"step\":\"throttle\",\"max_ms\":" + max + ",\"elapsed_ms\":" + ms + "}");
    }
}
