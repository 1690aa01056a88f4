// JavaHash prints, for each line of hex on standard input, the line and the
// String.hashCode of new String(bytes, UTF_8) ("-" is the empty input). It
// generated ../javahash.txt, which TestHashCodeCorpus checks; to regenerate,
// in internal/javacompat/testdata:
//   grep -v '^#' javahash.txt | cut -d' ' -f1 | java java/JavaHash.java > new.txt
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;

public class JavaHash {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        StringBuilder out = new StringBuilder();
        out.append("# String.hashCode of new String(hex bytes, UTF_8), java ").append(System.getProperty("java.version")).append('\n');
        for (String line; (line = in.readLine()) != null; ) {
            line = line.trim();
            if (line.isEmpty() || line.startsWith("#")) continue;
            String hex = line.equals("-") ? "" : line;
            byte[] b = new byte[hex.length() / 2];
            for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(hex.substring(2 * i, 2 * i + 2), 16);
            out.append(line).append(' ').append(new String(b, StandardCharsets.UTF_8).hashCode()).append('\n');
        }
        System.out.print(out);
    }
}
