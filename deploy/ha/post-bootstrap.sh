#!/bin/sh
# Patroni runs this once, on the member that bootstraps the group, with a connection URL as $1:
# streamgate's role (it makes each cluster's store database, hence CREATEDB) and database.
set -eu
psql "$1" -v ON_ERROR_STOP=1 -v password="$STREAMGATE_DB_PASSWORD" <<'SQL'
CREATE ROLE streamgate LOGIN CREATEDB PASSWORD :'password';
CREATE DATABASE streamgate OWNER streamgate;
GRANT pg_monitor TO streamgate;
SQL
