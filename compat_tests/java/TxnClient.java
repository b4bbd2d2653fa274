// The Java kafka-clients transactional producer against the broker, for
// compat_tests/kafka/test_java_clients.py. Prints JSON lines on stdout.
//
// usage: TxnClient BOOTSTRAP TOPIC TRANSACTIONAL_ID GROUP
//
// 1. initTransactions; commit 10 records "c-i"; abort 5 records "a-i" (flushed first)  -> {"step":"txns"}
// 2. consume-transform-produce step: sendOffsetsToTransaction(offset 10, groupMetadata),
//    commit; then committed() of the group                                             -> {"step":"offsets"}
// 3. with a transaction open: AdminClient listTransactions, describeTransactions, describeProducers
//    (what kafka-transactions.sh shows), then commit                                  -> {"step":"admin"}
// 4. a second producer with the same transactional.id fences the first: the first's
//    next transaction fails with ProducerFencedException                              -> {"step":"fenced"}
// 5. read_committed and read_uncommitted consumers read the topic from the start      -> {"step":"read"} x2
// Ends with {"step":"done"}; on an unexpected exception prints {"step":"error"} and exits 1.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TxnClient {
    static void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static Properties common(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("request.timeout.ms", "15000");
        p.put("default.api.timeout.ms", "30000");
        p.put("reconnect.backoff.max.ms", "1000");
        return p;
    }

    static KafkaProducer<byte[], byte[]> producer(String bootstrap, String tid) {
        Properties p = common(bootstrap);
        p.put("transactional.id", tid);
        p.put("max.block.ms", "30000");
        KafkaProducer<byte[], byte[]> producer =
            new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
        producer.initTransactions();
        return producer;
    }

    static void send(KafkaProducer<byte[], byte[]> producer, String topic, String value) {
        producer.send(new ProducerRecord<>(topic, 0, null, value.getBytes(StandardCharsets.UTF_8)));
    }

    static List<String> read(String bootstrap, String topic, String isolation, int expect) {
        Properties p = common(bootstrap);
        p.put("isolation.level", isolation);
        p.put("enable.auto.commit", "false");
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p, new ByteArrayDeserializer(),
                                                                   new ByteArrayDeserializer())) {
            TopicPartition tp = new TopicPartition(topic, 0);
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            long deadline = System.currentTimeMillis() + 20000;
            int idle = 0;
            while (System.currentTimeMillis() < deadline && (values.size() < expect || idle < 3)) {
                ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofMillis(500));
                idle = records.isEmpty() ? idle + 1 : 0;
                for (ConsumerRecord<byte[], byte[]> r : records) values.add(new String(r.value(), StandardCharsets.UTF_8));
            }
        }
        return values;
    }

    static String list(List<String> values) {
        StringBuilder b = new StringBuilder("[");
        for (int i = 0; i < values.size(); i++) b.append(i == 0 ? "" : ",").append('"').append(values.get(i)).append('"');
        return b.append(']').toString();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], tid = args[2], group = args[3];
        try {
            KafkaProducer<byte[], byte[]> first = producer(bootstrap, tid);
            first.beginTransaction();
            for (int i = 0; i < 10; i++) send(first, topic, "c-" + i);
            first.commitTransaction();
            first.beginTransaction();
            for (int i = 0; i < 5; i++) send(first, topic, "a-" + i);
            first.flush();
            first.abortTransaction();
            emit("{\"step\":\"txns\"}");

            Properties cp = common(bootstrap);
            cp.put("group.id", group);
            cp.put("enable.auto.commit", "false");
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(cp, new ByteArrayDeserializer(),
                                                                       new ByteArrayDeserializer())) {
                TopicPartition tp = new TopicPartition(topic, 0);
                first.beginTransaction();
                send(first, topic, "c-10");
                first.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(10)), c.groupMetadata());
                first.commitTransaction();
                OffsetAndMetadata committed = c.committed(Set.of(tp)).get(tp);
                emit("{\"step\":\"offsets\",\"committed\":" + (committed == null ? -1 : committed.offset()) + "}");
            }

            first.beginTransaction();
            send(first, topic, "open-1");
            first.flush();
            Properties ap = common(bootstrap);
            try (Admin admin = Admin.create(ap)) {
                TopicPartition tp = new TopicPartition(topic, 0);
                boolean listed = false;
                for (TransactionListing l : admin.listTransactions().all().get())
                    listed |= l.transactionalId().equals(tid) && l.state() == TransactionState.ONGOING;
                TransactionDescription d = admin.describeTransactions(List.of(tid)).all().get().get(tid);
                ProducerState p = admin.describeProducers(List.of(tp)).all().get().get(tp).activeProducers().get(0);
                emit("{\"step\":\"admin\",\"listed\":" + listed + ",\"state\":\"" + d.state() + "\",\"partitions\":"
                     + d.topicPartitions().size() + ",\"producer_matches\":" + (d.producerId() == p.producerId())
                     + ",\"txn_start_offset\":" + p.currentTransactionStartOffset().orElse(-1L) + "}");
            }
            first.commitTransaction();

            KafkaProducer<byte[], byte[]> second = producer(bootstrap, tid);
            String outcome;
            try {
                first.beginTransaction();
                send(first, topic, "zombie");
                first.commitTransaction();
                outcome = "committed";
            } catch (ProducerFencedException e) {
                outcome = "ProducerFencedException";
            } catch (KafkaException e) {
                outcome = e.getClass().getSimpleName() + ": " + e.getMessage();
            }
            emit("{\"step\":\"fenced\",\"outcome\":\"" + outcome.replace("\"", "'") + "\"}");
            first.close(Duration.ofSeconds(5));
            second.beginTransaction();
            send(second, topic, "successor");
            second.commitTransaction();
            second.close();

            emit("{\"step\":\"read\",\"isolation\":\"read_committed\",\"values\":"
                 + list(read(bootstrap, topic, "read_committed", 13)) + "}");
            emit("{\"step\":\"read\",\"isolation\":\"read_uncommitted\",\"values\":"
                 + list(read(bootstrap, topic, "read_uncommitted", 18)) + "}");
            emit("{\"step\":\"done\"}");
        } catch (Exception e) {
            emit("{\"step\":\"error\",\"error\":\"" + (e.getClass().getName() + ": " + e.getMessage())
                 .replace("\\", "/").replace("\"", "'") + "\"}");
            System.exit(1);
        }
    }
}
