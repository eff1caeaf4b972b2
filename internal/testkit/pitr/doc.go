// Package pitr backs up a PostgreSQL cluster and restores it to a point in
// time with PostgreSQL's own tools, for the restore drill: a database backed
// up, payments made, the database restored to a point before them (the
// commits after it lost, as a real restore loses them), then clients
// retrying. The drill proves that oncepay's retries move no money twice when
// the database has forgotten what it did, because what the provider sees is
// derived from what the client sends again, not from rows the restore took
// away.
//
// Nothing is faked. Start makes a throwaway cluster that archives every WAL
// segment into a directory of its own (archive_command); Backup takes a
// base backup with pg_basebackup, its WAL left to the archive; RestorePoint
// names a point in the WAL (pg_create_restore_point) and waits until it is
// archived; RestoreTo stops the server at once, puts the base backup in
// place of its data and has PostgreSQL replay the archive up to the named
// point and promote itself, on the same port: clients keep their URLs, and
// their pools meet broken connections and must open new ones, as after a
// restore in production.
//
// It needs the PostgreSQL server binaries (initdb, postgres) and
// pg_basebackup beside them: Debian's postgresql package, which .ci/run
// installs (its postgresql-client dependency brings pg_basebackup). Without
// them a test fails when CI=true and is skipped otherwise, saying how to
// install them. Run as root, the server runs as the postgres user the
// package creates.
package pitr
