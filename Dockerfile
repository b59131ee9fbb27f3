# txmsg: two images from one file.
#   the default (last) stage, `api`: `txmsg serve`, `txmsg checker`, `txmsg migrate` and the
#     admin commands; no Java, no Spark (`pip install .`)
#   `--target ingest`: the same plus Java, the JDBC drivers and the spark extra, for
#     `txmsg ingest` (`pip install '.[spark]'`)
FROM python:3.11-slim-bookworm AS base

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --system --uid 10001 --create-home --home-dir /srv/txmsg txmsg

FROM base AS ingest

# Java and the JDBC drivers that `txmsg ingest` (Spark over JDBC) loads from /usr/share/java,
# from Debian: nothing is downloaded at run time. Slim images lack the man directory the
# JRE's post-install script writes to.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      openjdk-17-jre-headless libpostgresql-jdbc-java libxerial-sqlite-jdbc-java \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src/txmsg
COPY . .
RUN pip install ".[spark]" \
 && cd / && rm -rf /src/txmsg

# the embedded SQLite default (sqlite:///var/txmsg.db) and Spark's scratch files land here;
# lake/ exists in the image so that a volume mounted there is writable by txmsg
USER txmsg
WORKDIR /srv/txmsg
RUN mkdir lake

ENTRYPOINT ["txmsg"]
CMD ["ingest", "--output", "/srv/txmsg/lake"]

FROM base AS api

WORKDIR /src/txmsg
COPY . .
RUN pip install . \
 && cd / && rm -rf /src/txmsg

# the embedded SQLite default (sqlite:///var/txmsg.db) lands here
USER txmsg
WORKDIR /srv/txmsg

EXPOSE 8080
ENTRYPOINT ["txmsg"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
