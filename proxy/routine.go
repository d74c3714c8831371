package proxy

import "github.com/go-mysql-org/go-mysql/mysql"

// writeLeading writes the result sets the last statement sent before its
// final reply (a CALL's, see engine.Session.TakeLeading), each flagged
// SERVER_MORE_RESULTS_EXISTS as MariaDB sends them; the OUT parameters of a
// prepared CALL keep SERVER_PS_OUT_PARAMS. The statement's own reply (its
// OK or error) follows, written by the caller.
func (h *handler) writeLeading() error {
	for _, r := range h.sess.TakeLeading() {
		flags := mysql.SERVER_MORE_RESULTS_EXISTS | r.Status&mysql.SERVER_PS_OUT_PARAMS
		h.conn.SetStatus(flags)
		err := h.write(r)
		h.conn.UnsetStatus(flags)
		if err != nil {
			return err
		}
	}
	return nil
}

// setMultiResults tells the session what the client announced about
// multiple results (a CALL's reply depends on it).
func (h *handler) setMultiResults() {
	h.sess.SetMultiResults(h.conn.HasCapability(mysql.CLIENT_MULTI_RESULTS), h.conn.HasCapability(mysql.CLIENT_PS_MULTI_RESULTS))
}
