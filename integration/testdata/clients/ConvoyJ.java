// MariaDB Connector/J against Convoy or MariaDB (integration/clients_test.go
// compares the two outputs): batches, binary and temporal parameters, result
// metadata, a rolled-back transaction, an error; once with client-side
// prepared statements (the driver's default), once with server-side ones
// (binary protocol).
//
//   java -cp /usr/share/java/mariadb-java-client.jar ConvoyJ.java HOST PORT USER PASSWORD
import java.sql.*;
import java.util.Arrays;

public class ConvoyJ {
    public static void main(String[] a) throws Exception {
        String url = "jdbc:mariadb://" + a[0] + ":" + a[1] + "/im?connectTimeout=5000";
        StringBuilder out = new StringBuilder();
        String[] modes = {"", "&useServerPrepStmts=true"};
        for (int m = 0; m < modes.length; m++) {
            long conv = 1500 + 100 * m, msg = 150000 + 1000 * m;
            try (Connection c = DriverManager.getConnection(url + modes[m], a[2], a[3])) {
                PreparedStatement ins = c.prepareStatement(
                        "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, ?, ?, ?)");
                for (int i = 1; i <= 6; i++) {
                    ins.setLong(1, conv + i % 2);
                    ins.setLong(2, i);
                    ins.setLong(3, msg + i);
                    ins.setLong(4, 8);
                    ins.setInt(5, 1);
                    ins.setTimestamp(6, Timestamp.valueOf("2026-03-04 10:00:0" + i + ".125"));
                    ins.addBatch();
                }
                out.append("batch=").append(Arrays.toString(ins.executeBatch()));

                PreparedStatement body = c.prepareStatement(
                        "INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (?, ?, 8, 1, ?, ?)");
                body.setLong(1, msg + 1);
                body.setLong(2, conv + 1);
                body.setBytes(3, new byte[] {(byte) 0xff, 0, '\'', '\\', 'x'});
                body.setString(4, "2026-03-04 10:00:01.125");
                out.append(" body=").append(body.executeUpdate());

                PreparedStatement sel = c.prepareStatement(
                        "SELECT seq, msg_id, created_at FROM conv_msg WHERE conv_id = ? AND seq <= ? ORDER BY seq DESC LIMIT ?");
                sel.setLong(1, conv);
                sel.setLong(2, 6);
                sel.setInt(3, 2);
                try (ResultSet rs = sel.executeQuery()) {
                    ResultSetMetaData md = rs.getMetaData();
                    out.append(" cols=").append(md.getColumnCount()).append(' ')
                            .append(md.getColumnName(2)).append('/').append(md.getTableName(2)).append('/')
                            .append(md.getColumnTypeName(3));
                    while (rs.next()) {
                        out.append(" |").append(rs.getLong(1)).append(',').append(rs.getLong("msg_id"))
                                .append(',').append(rs.getTimestamp(3));
                    }
                }

                PreparedStatement bs = c.prepareStatement(
                        "SELECT HEX(content), content FROM msg_content WHERE conv_id = ? AND msg_id = ?");
                bs.setLong(1, conv + 1);
                bs.setLong(2, msg + 1);
                try (ResultSet rs = bs.executeQuery()) {
                    while (rs.next()) {
                        out.append(" |").append(rs.getString(1)).append(',').append(Arrays.toString(rs.getBytes(2)));
                    }
                }

                c.setAutoCommit(false);
                try (Statement st = c.createStatement()) {
                    st.executeUpdate("UPDATE conv_msg SET msg_type = 9 WHERE conv_id = " + (conv + 1) + " AND seq = 1");
                    c.rollback();
                    c.setAutoCommit(true);
                    try (ResultSet rs = st.executeQuery("SELECT msg_type FROM conv_msg WHERE conv_id = " + (conv + 1) + " AND seq = 1")) {
                        while (rs.next()) {
                            out.append(" |msg_type=").append(rs.getInt(1));
                        }
                    }
                    try {
                        st.executeQuery("SELECT * FROM no_such_table");
                        out.append(" |no error");
                    } catch (SQLException e) {
                        out.append(" |error=").append(e.getErrorCode()).append('/').append(e.getSQLState());
                    }
                }
                out.append('\n');
            }
        }
        System.out.print(out);
    }
}
