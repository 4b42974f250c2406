package kinesisbroker.kcl;

import java.io.BufferedReader;
import java.io.FileWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import software.amazon.awssdk.auth.credentials.AwsBasicCredentials;
import software.amazon.awssdk.auth.credentials.StaticCredentialsProvider;
import software.amazon.awssdk.http.Protocol;
import software.amazon.awssdk.http.nio.netty.NettyNioAsyncHttpClient;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.cloudwatch.CloudWatchAsyncClient;
import software.amazon.awssdk.services.dynamodb.DynamoDbAsyncClient;
import software.amazon.awssdk.services.kinesis.KinesisAsyncClient;
import software.amazon.kinesis.common.ConfigsBuilder;
import software.amazon.kinesis.common.InitialPositionInStream;
import software.amazon.kinesis.common.InitialPositionInStreamExtended;
import software.amazon.kinesis.coordinator.Scheduler;
import software.amazon.kinesis.leases.LeaseManagementConfig;
import software.amazon.kinesis.lifecycle.events.InitializationInput;
import software.amazon.kinesis.lifecycle.events.LeaseLostInput;
import software.amazon.kinesis.lifecycle.events.ProcessRecordsInput;
import software.amazon.kinesis.lifecycle.events.ShardEndedInput;
import software.amazon.kinesis.lifecycle.events.ShutdownRequestedInput;
import software.amazon.kinesis.metrics.MetricsConfig;
import software.amazon.kinesis.metrics.NullMetricsFactory;
import software.amazon.kinesis.processor.ShardRecordProcessor;
import software.amazon.kinesis.retrieval.KinesisClientRecord;
import software.amazon.kinesis.retrieval.RetrievalConfig;
import software.amazon.kinesis.retrieval.polling.PollingConfig;

/**
 * A KCL application that consumes part of a stream and checkpoints, for the import test.
 *
 * <p>Each shard named in {@code KCL_LIMITS} ({@code shardId-000000000000=300,...}) is processed
 * up to that many records (sub-records of KPL aggregates count one each, as the KCL delivers
 * them). Every processed record is appended to {@code KCL_OUT} as
 * {@code shard TAB sequence TAB subsequence TAB payload}, and after each batch the last
 * processed record is checkpointed with {@code checkpoint(sequence, subsequence)}: the KCL's
 * inclusive checkpoint, inside an aggregate when the limit falls inside one. Records past a
 * shard's limit are delivered by the KCL but not processed, logged or checkpointed, as in an
 * application stopped at that point.
 *
 * <p>Standard output: {@code KCL CHECKPOINTED shard sequence subsequence} once a shard's limit
 * is processed and checkpointed ({@code KCL CHECKPOINTED shard none} for a limit of 0: never
 * processed, never checkpointed), {@code KCL ALL_CHECKPOINTED} once every named shard's is, and
 * {@code KCL STOPPED} after a graceful shutdown, which a line {@code stop} (or the end) of
 * standard input starts. Until then the workers keep renewing their leases.
 *
 * <p>Environment: {@code KCL_STREAM}, {@code KCL_APP} (the application name, which is the lease
 * table's), {@code KCL_WORKER}, {@code KCL_KINESIS_ENDPOINT}, {@code KCL_DYNAMODB_ENDPOINT},
 * {@code KCL_FAILOVER_MS}, {@code KCL_LIMITS}, {@code KCL_OUT}, {@code AWS_REGION},
 * {@code AWS_ACCESS_KEY_ID}, {@code AWS_SECRET_ACCESS_KEY}. Metrics are off
 * ({@link NullMetricsFactory}: CloudWatch is never called) and retrieval is by polling.
 */
public final class KclConsumer {
    private static final Map<String, Integer> LIMITS = new HashMap<>();
    private static final Map<String, Integer> DONE = new ConcurrentHashMap<>();
    private static final Map<String, Boolean> REPORTED = new ConcurrentHashMap<>();
    private static CountDownLatch allCheckpointed;
    private static PrintWriter out;

    private KclConsumer() {}

    private static String env(String name) {
        String value = System.getenv(name);
        if (value == null || value.isEmpty()) {
            throw new IllegalArgumentException("environment variable " + name + " is not set");
        }
        return value;
    }

    private static synchronized void say(String line) {
        System.out.println("KCL " + line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        // kinesis-local speaks JSON as well as CBOR; JSON keeps the exchanges readable in logs.
        System.setProperty("aws.cborEnabled", "false");
        String stream = env("KCL_STREAM");
        String app = env("KCL_APP");
        for (String part : env("KCL_LIMITS").split(",")) {
            String[] kv = part.split("=", 2);
            LIMITS.put(kv[0].trim(), Integer.parseInt(kv[1].trim()));
        }
        allCheckpointed = new CountDownLatch(LIMITS.size());
        out = new PrintWriter(new FileWriter(env("KCL_OUT"), StandardCharsets.UTF_8, true));

        Region region = Region.of(env("AWS_REGION"));
        StaticCredentialsProvider credentials = StaticCredentialsProvider.create(
                AwsBasicCredentials.create(env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")));
        // Plain http on 127.0.0.1: HTTP/1.1 (the KCL's own client factory asks for HTTP/2,
        // which needs TLS here).
        KinesisAsyncClient kinesis = KinesisAsyncClient.builder()
                .region(region)
                .credentialsProvider(credentials)
                .endpointOverride(URI.create(env("KCL_KINESIS_ENDPOINT")))
                .httpClientBuilder(NettyNioAsyncHttpClient.builder().protocol(Protocol.HTTP1_1))
                .build();
        DynamoDbAsyncClient dynamo = DynamoDbAsyncClient.builder()
                .region(region)
                .credentialsProvider(credentials)
                .endpointOverride(URI.create(env("KCL_DYNAMODB_ENDPOINT")))
                .httpClientBuilder(NettyNioAsyncHttpClient.builder().protocol(Protocol.HTTP1_1))
                .build();
        // Required by ConfigsBuilder, never called: the metrics factory below publishes nothing.
        CloudWatchAsyncClient cloudWatch = CloudWatchAsyncClient.builder()
                .region(region)
                .credentialsProvider(credentials)
                .endpointOverride(URI.create("http://127.0.0.1:9"))
                .build();

        ConfigsBuilder configs =
                new ConfigsBuilder(stream, app, kinesis, dynamo, cloudWatch, env("KCL_WORKER"), Processor::new);
        // The shard sync interval is also how long the first sync sleeps before the worker
        // starts (60 s by default): 1 s keeps the tests short.
        LeaseManagementConfig leases = configs.leaseManagementConfig()
                .failoverTimeMillis(Long.parseLong(env("KCL_FAILOVER_MS")))
                .shardSyncIntervalMillis(1000L);
        RetrievalConfig retrieval = configs.retrievalConfig()
                .retrievalSpecificConfig(new PollingConfig(stream, kinesis).idleTimeBetweenReadsInMillis(250))
                .initialPositionInStreamExtended(
                        InitialPositionInStreamExtended.newInitialPosition(InitialPositionInStream.TRIM_HORIZON));
        MetricsConfig metrics = configs.metricsConfig().metricsFactory(new NullMetricsFactory());
        Scheduler scheduler = new Scheduler(
                configs.checkpointConfig(),
                configs.coordinatorConfig(),
                leases,
                configs.lifecycleConfig(),
                metrics,
                configs.processorConfig(),
                retrieval);
        Thread worker = new Thread(scheduler, "kcl-scheduler");
        worker.setDaemon(true);
        worker.start();

        allCheckpointed.await();
        say("ALL_CHECKPOINTED");
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = stdin.readLine()) != null && !line.trim().equals("stop")) {
            // Anything else is ignored: only "stop" (or the end of input) stops.
        }
        boolean clean = scheduler.startGracefulShutdown().get(120, TimeUnit.SECONDS);
        out.close();
        say("STOPPED clean=" + clean);
        System.exit(0);
    }

    /** One shard's processor: processes up to the shard's limit, checkpointing each batch. */
    private static final class Processor implements ShardRecordProcessor {
        private String shard;

        @Override
        public void initialize(InitializationInput input) {
            shard = input.shardId();
            // A limit of 0: the shard is never processed, its checkpoint stays where the KCL
            // started it.
            if (LIMITS.getOrDefault(shard, Integer.MAX_VALUE) == 0 && REPORTED.putIfAbsent(shard, true) == null) {
                say("CHECKPOINTED " + shard + " none");
                allCheckpointed.countDown();
            }
        }

        @Override
        public void processRecords(ProcessRecordsInput input) {
            int limit = LIMITS.getOrDefault(shard, Integer.MAX_VALUE);
            KinesisClientRecord last = null;
            synchronized (KclConsumer.class) {
                for (KinesisClientRecord record : input.records()) {
                    int done = DONE.getOrDefault(shard, 0);
                    if (done >= limit) {
                        break;
                    }
                    String payload = StandardCharsets.UTF_8.decode(record.data().duplicate()).toString();
                    out.println(shard + "\t" + record.sequenceNumber() + "\t" + record.subSequenceNumber() + "\t"
                            + payload);
                    DONE.put(shard, done + 1);
                    last = record;
                }
                out.flush();
                if (out.checkError()) {
                    throw new UncheckedIOException(new IOException("cannot write KCL_OUT"));
                }
            }
            if (last != null) {
                try {
                    input.checkpointer().checkpoint(last.sequenceNumber(), last.subSequenceNumber());
                } catch (Exception e) {
                    throw new IllegalStateException("checkpoint of " + shard + " failed", e);
                }
            }
            if (DONE.getOrDefault(shard, 0) >= limit && REPORTED.putIfAbsent(shard, true) == null) {
                if (last == null) {
                    throw new IllegalStateException("limit of " + shard + " reached without a record");
                }
                say("CHECKPOINTED " + shard + " " + last.sequenceNumber() + " " + last.subSequenceNumber());
                allCheckpointed.countDown();
            }
        }

        @Override
        public void leaseLost(LeaseLostInput input) {
            // Nothing to flush: every processed record was checkpointed with its batch.
        }

        @Override
        public void shardEnded(ShardEndedInput input) {
            try {
                input.checkpointer().checkpoint();
            } catch (Exception e) {
                throw new IllegalStateException("checkpoint at the end of " + shard + " failed", e);
            }
        }

        @Override
        public void shutdownRequested(ShutdownRequestedInput input) {
            // Checkpoints were written after every batch. Checkpointing the largest permitted
            // value here would also cover records delivered past the limit but never processed.
        }
    }
}
