// The JSON-lines report shared by the Java client programs (Kafka4Clients, RabbitAmqpClient, RabbitStreamClient):
// one object per line on stdout, each with a "step" field, for the Python tests to check. Compiled
// with them (compat_tests.tools.compile_java's ``helpers``).

import java.util.*;

/** The programs extend it to call its static methods unqualified (a default-package class cannot be
 * imported statically). */
public abstract class JsonLines {
    static volatile boolean failed = false;

    static Map<String, Object> obj(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        return m;
    }

    static void json(StringBuilder b, Object v) {
        if (v == null) {
            b.append("null");
        } else if (v instanceof Optional) {
            json(b, ((Optional<?>) v).orElse(null));
        } else if (v instanceof Map) {
            b.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                if (!first) b.append(',');
                first = false;
                json(b, String.valueOf(e.getKey()));
                b.append(':');
                json(b, e.getValue());
            }
            b.append('}');
        } else if (v instanceof Collection) {
            b.append('[');
            boolean first = true;
            for (Object o : (Collection<?>) v) {
                if (!first) b.append(',');
                first = false;
                json(b, o);
            }
            b.append(']');
        } else if (v instanceof Number || v instanceof Boolean) {
            b.append(v);
        } else {
            b.append('"');
            for (char c : v.toString().toCharArray()) {
                if (c == '"' || c == '\\') b.append('\\').append(c);
                else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                else b.append(c);
            }
            b.append('"');
        }
    }

    static synchronized void emit(String step, Object... kv) {
        Map<String, Object> m = obj("step", step);
        m.putAll(obj(kv));
        StringBuilder b = new StringBuilder();
        json(b, m);
        System.out.println(b);
        System.out.flush();
    }

    interface Stage { void run() throws Exception; }

    /** Runs one stage; a stage that throws is reported as {"step":"error"} and the next one runs. */
    static void stage(String name, Stage s) {
        try {
            s.run();
        } catch (Throwable e) {
            failed = true;
            StringBuilder why = new StringBuilder(e.getClass().getName() + ": " + e.getMessage());
            for (Throwable c = e.getCause(); c != null && c != c.getCause(); c = c.getCause()) {
                why.append(" <- ").append(c.getClass().getName()).append(": ").append(c.getMessage());
            }
            StackTraceElement[] at = e.getStackTrace();
            for (int i = 0; i < Math.min(at.length, 8); i++) why.append(" | ").append(at[i]);
            emit("error", "stage", name, "error", why.toString());
        }
    }

    static void check(boolean ok, String what) {
        if (!ok) throw new IllegalStateException("check failed: " + what);
    }

    static void finish() {
        emit("done");
        System.exit(failed ? 1 : 0);
    }
}
