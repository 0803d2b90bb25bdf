// Starts one OpenSearch node inside this JVM, for decant's tests.
//
// The same approach as ../es/src/DecantEsNode.java: OpenSearch's own launcher
// (org.opensearch.bootstrap.OpenSearch) insists on a distribution layout, a
// security manager (2.x) or its Java agent (3.x) and bootstrap checks; the
// node itself needs none of that. Subclassing Node reaches the
// protected constructor that accepts plugin classes found on the classpath,
// which is how OpenSearch's own integration tests run nodes ("MockNode").
//
// One source for OpenSearch 2.19 and 3.x (opensearch.sh compiles it against
// the jars of the version it runs). They differ in two places: the
// netty4 plugin class was renamed (Netty4Plugin -> Netty4ModulePlugin), and
// the constructor takes Collection<Class<? extends Plugin>> in 2.x but
// Collection<PluginInfo> in 3.x. Both erase to the same Collection, so the
// plugins are looked up by name and passed in the form the constructor's
// declared type asks for.
//
// Usage: java -cp decant-opensearch-node.jar:libs/... DecantOpenSearchNode key=value...
// Every argument is an OpenSearch setting (path.home, http.port, ...). The
// log4j2 configuration is read from <path.home>/config/log4j2.properties,
// exactly as a real node reads it, so OpenSearch's log4j plugins (%node_name,
// the Warning header appender) work.
import java.io.PrintStream;
import java.lang.reflect.ParameterizedType;
import java.lang.reflect.Type;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.core.LoggerContext;
import org.apache.logging.log4j.core.config.Configurator;
import org.opensearch.Version;
import org.opensearch.common.logging.LogConfigurator;
import org.opensearch.common.settings.Settings;
import org.opensearch.env.Environment;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.plugins.Plugin;
import org.opensearch.plugins.PluginInfo;

public final class DecantOpenSearchNode extends Node {

    // The netty4 plugin gives the HTTP and transport layers. Nothing else:
    // index creation with nested mappings, _bulk with external versions,
    // aliases, _refresh, _count, _search and _doc are all in the server
    // itself. No security plugin, so plain HTTP without authentication.
    // Each entry lists the class's names, 2.x first.
    private static final List<List<String>> PLUGINS = List.of(
        List.of("org.opensearch.transport.Netty4Plugin", "org.opensearch.transport.Netty4ModulePlugin"));

    @SuppressWarnings({"unchecked", "rawtypes"})
    private DecantOpenSearchNode(Environment env, Collection<?> plugins) {
        // forbidPrivateIndexSettings=true: behave like a production node.
        super(env, (Collection) plugins, true);
    }

    // classpathPlugins returns PLUGINS as the protected constructor wants
    // them: plugin classes (2.x) or PluginInfo records naming them (3.x,
    // filled in like OpenSearch's own test nodes do).
    private static Collection<?> classpathPlugins() throws ReflectiveOperationException {
        Type declared = Node.class.getDeclaredConstructor(Environment.class, Collection.class, boolean.class)
            .getGenericParameterTypes()[1];
        boolean infos = ((ParameterizedType) declared).getActualTypeArguments()[0] == PluginInfo.class;
        List<Object> out = new ArrayList<>();
        for (List<String> names : PLUGINS) {
            Class<? extends Plugin> cls = pluginClass(names);
            out.add(infos
                ? new PluginInfo(cls.getName(), "classpath plugin", "NA", Version.CURRENT,
                    Integer.toString(Runtime.version().feature()), cls.getName(), List.of(), false)
                : cls);
        }
        return out;
    }

    private static Class<? extends Plugin> pluginClass(List<String> names) throws ClassNotFoundException {
        for (String name : names) {
            try {
                return Class.forName(name).asSubclass(Plugin.class);
            } catch (ClassNotFoundException e) {
                // try the next name
            }
        }
        throw new ClassNotFoundException("none of " + names + " is on the class path");
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
            node = new DecantOpenSearchNode(env, classpathPlugins());
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
