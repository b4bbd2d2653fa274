// A Kafka Streams application with exactly_once_v2, for compat_tests/kafka/test_kafka_streams.py.
//
// usage: StreamsWordCount BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR GROUP_PROTOCOL [REPLICATION_FACTOR]
//
// Reads INPUT (values are words), re-keys each record by its word (a repartition topic), counts
// per word in a persistent store (a changelog topic) and writes "word -> count" to OUTPUT. The
// record cache is off, so every input record makes exactly one output update: read committed,
// each word's counts are 1, 2, 3, ... with no gap and no repeat, however often the application
// is killed. GROUP_PROTOCOL is "classic" or "streams" (KIP-1071). REPLICATION_FACTOR (default 1)
// is that of the internal topics (3 on a cluster whose brokers are killed).
//
// Prints one line per state change ("state RUNNING", ...) on stdout and runs until killed.

import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

public class StreamsWordCount {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], appId = args[1], input = args[2], output = args[3], stateDir = args[4];
        String protocol = args[5];
        int replication = args.length > 6 ? Integer.parseInt(args[6]) : 1;

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
               .map((key, word) -> KeyValue.pair(word, word))
               .groupByKey(Grouped.with("by-word", Serdes.String(), Serdes.String()))
               .count(Materialized.as("counts"))
               .toStream()
               .mapValues(count -> Long.toString(count))
               .to(output, Produced.with(Serdes.String(), Serdes.String()));

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, replication);
        props.put("group.protocol", protocol);
        props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        props.put(StreamsConfig.producerPrefix("transaction.timeout.ms"), 10000);
        if (protocol.equals("classic")) {
            props.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 6000);
            props.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 1000);
        }

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch dead = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("state " + now);
            System.out.flush();
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                dead.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(exc -> {
            System.out.println("error " + exc);
            System.out.flush();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        streams.start();
        dead.await();
        System.exit(1);
    }
}
