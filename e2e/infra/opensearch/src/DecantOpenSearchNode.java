// Starts one OpenSearch node inside this JVM, for decant's tests.
//
// The same approach as ../es/src/DecantEsNode.java: OpenSearch's own launcher
// (org.opensearch.bootstrap.OpenSearch) insists on a distribution layout, a
// security manager and bootstrap checks; subclassing Node reaches the
// protected constructor that accepts plugin classes found on the classpath,
// which is how OpenSearch's own integration tests run nodes ("MockNode").
// The source compiles unchanged against OpenSearch 2.19 and 3.x.
//
// Usage: java -cp decant-opensearch-node.jar:libs/... DecantOpenSearchNode key=value...
// Every argument is an OpenSearch setting (path.home, http.port, ...). The
// log4j2 configuration is read from <path.home>/config/log4j2.properties,
// exactly as a real node reads it, so OpenSearch's log4j plugins (%node_name,
// the Warning header appender) work.
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
import org.opensearch.common.logging.LogConfigurator;
import org.opensearch.common.settings.Settings;
import org.opensearch.env.Environment;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.plugins.Plugin;
import org.opensearch.transport.Netty4Plugin;

public final class DecantOpenSearchNode extends Node {

    // Netty4Plugin gives the HTTP and transport layers. Nothing else: index
    // creation with nested mappings, _bulk with external versions, aliases,
    // _refresh, _count, _search and _doc are all in the server itself. No
    // security plugin, so plain HTTP without authentication.
    private static final List<Class<? extends Plugin>> PLUGINS = List.of(Netty4Plugin.class);

    private DecantOpenSearchNode(Environment env, Collection<Class<? extends Plugin>> plugins) {
        // forbidPrivateIndexSettings=true: behave like a production node.
        super(env, plugins, true);
    }

    public static void main(String[] args) throws Exception {
        Settings.Builder builder = Settings.builder();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            if (eq <= 0) {
                System.err.println("DecantOpenSearchNode: expected key=value, got [" + arg + "]");
                System.exit(2);
            }
            builder.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        Settings settings = builder.build();
        String nodeName = settings.get("node.name", "decant-os");

        // LogConfigurator.configure routes System.out/err into log4j; keep the
        // real streams for our own messages so start-up failures land in
        // opensearch.out whatever the log configuration says.
        final PrintStream out = System.out;
        final PrintStream err = System.err;

        LogConfigurator.registerErrorListener();
        Environment env = InternalSettingsPreparer.prepareEnvironment(settings, Map.of(), null, () -> nodeName);
        // Node only sets the log node name itself when node.name was not given.
        LogConfigurator.setNodeName(nodeName);
        LogConfigurator.configure(env);

        final DecantOpenSearchNode node;
        try {
            node = new DecantOpenSearchNode(env, PLUGINS);
        } catch (Throwable t) {
            err.println("DecantOpenSearchNode: cannot create the node");
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
                    err.println("DecantOpenSearchNode: node did not close within 20s");
                }
            } catch (Throwable t) {
                err.println("DecantOpenSearchNode: error while closing the node");
                t.printStackTrace(err);
            } finally {
                Configurator.shutdown((LoggerContext) LogManager.getContext(false));
            }
        }, "decant-os-shutdown"));

        try {
            node.start();
        } catch (Throwable t) {
            err.println("DecantOpenSearchNode: cannot start the node");
            t.printStackTrace(err);
            System.exit(1);
        }
        out.println("DecantOpenSearchNode: started " + nodeName + " with " + Arrays.toString(args));

        // OpenSearch threads are daemons: keep the JVM alive until a signal arrives.
        new CountDownLatch(1).await();
    }
}
