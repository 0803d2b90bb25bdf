// Starts one Elasticsearch 7.17 node inside this JVM, for decant's tests.
//
// ES's own launcher (org.elasticsearch.bootstrap.Elasticsearch) insists on a
// distribution layout, a security manager and bootstrap checks. The node
// itself needs none of that: subclassing Node reaches the protected
// constructor that accepts plugin classes found on the classpath, which is
// how ES's own integration tests run nodes ("MockNode").
//
// Usage: java -cp classes:libs/* DecantEsNode key=value...
// Every argument is an ES setting (path.home, http.port, ...). The log4j2
// configuration is read from <path.home>/config/log4j2.properties, exactly as a
// real node reads it, so ES's log4j plugins (%node_name, the Warning header
// appender) work.
import java.io.PrintStream;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.core.LoggerContext;
import org.apache.logging.log4j.core.config.Configurator;
import org.elasticsearch.common.logging.LogConfigurator;
import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.env.Environment;
import org.elasticsearch.index.mapper.MapperExtrasPlugin;
import org.elasticsearch.node.InternalSettingsPreparer;
import org.elasticsearch.node.Node;
import org.elasticsearch.plugins.Plugin;
import org.elasticsearch.reindex.ReindexPlugin;
import org.elasticsearch.transport.Netty4Plugin;

public final class DecantEsNode extends Node {

    // Netty4Plugin gives the HTTP and transport layers; reindex brings
    // _reindex, _update_by_query and _delete_by_query; mapper-extras brings
    // scaled_float, rank_feature, search_as_you_type, token_count.
    private static final List<Class<? extends Plugin>> PLUGINS =
        List.of(Netty4Plugin.class, ReindexPlugin.class, MapperExtrasPlugin.class);

    private DecantEsNode(Environment env, Collection<Class<? extends Plugin>> plugins) {
        // forbidPrivateIndexSettings=true: behave like a production node.
        super(env, plugins, true);
    }

    public static void main(String[] args) throws Exception {
        Settings.Builder builder = Settings.builder();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            if (eq <= 0) {
                System.err.println("DecantEsNode: expected key=value, got [" + arg + "]");
                System.exit(2);
            }
            builder.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        Settings settings = builder.build();
        String nodeName = settings.get("node.name", "decant-es");

        // LogConfigurator.configure routes System.out/err into log4j (loggers
        // "stdout" and "stderr"); keep the real streams for our own messages so
        // start-up failures land in es.out whatever the log configuration says.
        final PrintStream out = System.out;
        final PrintStream err = System.err;

        LogConfigurator.registerErrorListener();
        Environment env = InternalSettingsPreparer.prepareEnvironment(settings, Map.of(), null, () -> nodeName);
        // Node only sets the log node name itself when node.name was not given.
        LogConfigurator.setNodeName(nodeName);
        LogConfigurator.configure(env);

        final DecantEsNode node;
        try {
            node = new DecantEsNode(env, PLUGINS);
        } catch (Throwable t) {
            err.println("DecantEsNode: cannot create the node");
            t.printStackTrace(err);
            System.exit(1);
            return;
        }

        // SIGTERM/SIGINT: close the node (flushes shards, releases the data
        // path lock), then stop log4j, whose own hook is disabled so that the
        // node's closing messages still reach the log.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                node.close();
                if (!node.awaitClose(20, TimeUnit.SECONDS)) {
                    err.println("DecantEsNode: node did not close within 20s");
                }
            } catch (Throwable t) {
                err.println("DecantEsNode: error while closing the node");
                t.printStackTrace(err);
            } finally {
                Configurator.shutdown((LoggerContext) LogManager.getContext(false));
            }
        }, "decant-es-shutdown"));

        try {
            node.start();
        } catch (Throwable t) {
            err.println("DecantEsNode: cannot start the node");
            t.printStackTrace(err);
            System.exit(1);
        }
        out.println("DecantEsNode: started " + nodeName + " with " + Arrays.toString(args));

        // ES threads are daemons: keep the JVM alive until a signal arrives.
        new CountDownLatch(1).await();
    }
}
