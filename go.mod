module github.com/sluicedb/sluice

go 1.26.8

require (
	github.com/jackc/pgx/v5 v5.12.0
	github.com/spf13/cobra v1.10.2
	go.etcd.io/bbolt v1.5.0
)

require (
	github.com/cockroachdb/datadriven v1.0.3 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	golang.org/x/tools v0.48.0 // indirect
	gonum.org/v1/gonum v0.17.0 // indirect
)
