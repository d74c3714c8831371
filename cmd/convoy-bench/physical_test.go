package main

import "testing"

// The client-side router must pick the physical table Convoy picks for the
// same route layout (42 -> shard 136 -> im_1.conv_msg_0136 on ds0 with
// 2 datasources x 8 databases; 2^63+5 -> shard 902 -> im_7 on ds1).
func TestPhysicalRoute(t *testing.T) {
	p, err := openPhysical("ds0=root@tcp(127.0.0.1:1)/,ds1=root@tcp(127.0.0.1:2)/", 8, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	for _, c := range []struct {
		conv    uint64
		sql, ds string
	}{
		{42, "SELECT msg_id FROM `im_1`.`conv_msg_0136` WHERE conv_id = ? AND seq = ?", "ds0"},
		{1<<63 + 5, "SELECT msg_id FROM `im_7`.`conv_msg_0902` WHERE conv_id = ? AND seq = ?", "ds1"},
	} {
		q, ds := p.route(sqlPoint, c.conv)
		if q != c.sql || ds != c.ds {
			t.Errorf("route(%d) = %q on %s, want %q on %s", c.conv, q, ds, c.sql, c.ds)
		}
	}
	if _, err := openPhysical("ds0", 8, 1, true); err == nil {
		t.Error("a spec without name=DSN was accepted")
	}
}
