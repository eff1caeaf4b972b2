-- The two roles oncepay runs as, on the database psql is connected to:
--
--   owner_role (default oncepay_owner)  owns the schema; `api migrate` runs as it
--   app_role   (default oncepay_app)    what `api serve`, `worker` and the operator
--                                       commands run as: reads and writes rows,
--                                       cannot create, alter or drop anything
--
-- Run it as a superuser, or as a role with CREATEROLE that may grant itself
-- membership in owner_role (a managed PostgreSQL's admin user):
--
--   psql "$ADMIN_DATABASE_URL" -v ON_ERROR_STOP=1 \
--     -v owner_password="$OWNER_PASSWORD" -v app_password="$APP_PASSWORD" -f deploy/db/roles.sql
--
-- Running it again changes nothing but the passwords. Tables created later
-- by owner_role's migrations are granted to app_role as they are created.

\if :{?owner_role}
\else
\set owner_role oncepay_owner
\endif
\if :{?app_role}
\else
\set app_role oncepay_app
\endif

SELECT format('CREATE ROLE %I LOGIN', :'owner_role')
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'owner_role') \gexec
SELECT format('CREATE ROLE %I LOGIN', :'app_role')
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'app_role') \gexec
\if :{?owner_password}
ALTER ROLE :"owner_role" PASSWORD :'owner_password';
\endif
\if :{?app_password}
ALTER ROLE :"app_role" PASSWORD :'app_password';
\endif

-- Whoever runs this must act as the owner to hand it the database and to set
-- its default privileges; a superuser may already, an admin user may not.
SELECT format('GRANT %I TO CURRENT_USER', :'owner_role')
 WHERE NOT pg_has_role(current_user, :'owner_role', 'USAGE') \gexec

SELECT format('ALTER DATABASE %I OWNER TO %I', current_database(), :'owner_role') \gexec
ALTER SCHEMA public OWNER TO :"owner_role";
-- Before PostgreSQL 15 every role could create in public.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
SELECT format('GRANT CONNECT, TEMPORARY ON DATABASE %I TO %I', current_database(), :'app_role') \gexec
GRANT USAGE ON SCHEMA public TO :"app_role";

-- Rows, not structure: what exists now, and whatever the owner creates later.
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO :"app_role";
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO :"app_role";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner_role" IN SCHEMA public
  GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO :"app_role";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner_role" IN SCHEMA public
  GRANT USAGE, SELECT ON SEQUENCES TO :"app_role";
