// Regenerates ../java_conversions.golden: for each input (hex-encoded UTF-8,
// one per line of ../java_conversions.in) the results of the Java library
// conversions RocketMQ's SQL92 evaluator applies to property strings.
//
//   cd filter/testdata/java && javac JavaConversions.java && java JavaConversions
//
// Columns: input hex, Integer.parseInt, Long.parseLong,
// Double.doubleToLongBits(Double.valueOf) in hex, Boolean.valueOf; ERR where
// a NumberFormatException is thrown.
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;

public class JavaConversions {
    public static void main(String[] args) throws Exception {
        List<String> out = new ArrayList<>();
        for (String line : Files.readAllLines(Paths.get("../java_conversions.in"))) {
            line = line.trim();
            if (line.isEmpty() || line.startsWith("#")) {
                continue;
            }
            byte[] b = new byte[line.length() / 2];
            for (int i = 0; i < b.length; i++) {
                b[i] = (byte) Integer.parseInt(line.substring(2 * i, 2 * i + 2), 16);
            }
            String s = new String(b, StandardCharsets.UTF_8);
            String i32, i64, dbl;
            try { i32 = Integer.toString(Integer.parseInt(s)); } catch (NumberFormatException e) { i32 = "ERR"; }
            try { i64 = Long.toString(Long.parseLong(s)); } catch (NumberFormatException e) { i64 = "ERR"; }
            try { dbl = Long.toHexString(Double.doubleToLongBits(Double.valueOf(s))); } catch (NumberFormatException e) { dbl = "ERR"; }
            out.add(line + "\t" + i32 + "\t" + i64 + "\t" + dbl + "\t" + Boolean.valueOf(s));
        }
        Files.write(Paths.get("../java_conversions.golden"), out);
    }
}
