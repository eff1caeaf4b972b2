package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// databaseServer exports the database server a process's connections are
// on and how many times it moved (the failovers the process rode), read at
// each scrape.
type databaseServer struct {
	read         func() (server string, timeline int, moves int64)
	server, move *prometheus.Desc
}

// RegisterDatabaseServer exports what read says of the database server
// the process's newest connection found (postgres.ServerWatch.Read).
func (m *Metrics) RegisterDatabaseServer(read func() (server string, timeline int, moves int64)) {
	m.registry.MustRegister(&databaseServer{read: read,
		server: prometheus.NewDesc("oncepay_database_server_info",
			"1 for the database server this process's newest connection found, by address and WAL timeline.", []string{"server", "timeline"}, nil),
		move: prometheus.NewDesc("oncepay_database_primary_moves_total",
			"How many times this process's new connections found another database server or timeline than before: the failovers and switchovers it rode.", nil, nil),
	})
}

func (d *databaseServer) Describe(ch chan<- *prometheus.Desc) {
	ch <- d.server
	ch <- d.move
}

func (d *databaseServer) Collect(ch chan<- prometheus.Metric) {
	server, timeline, moves := d.read()
	if server != "" {
		ch <- prometheus.MustNewConstMetric(d.server, prometheus.GaugeValue, 1, server, strconv.Itoa(timeline))
	}
	ch <- prometheus.MustNewConstMetric(d.move, prometheus.CounterValue, float64(moves))
}
