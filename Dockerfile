# The RCA service image: `rca serve`, `rca worker` and `rca migrate` (see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RCA_DATA_DIR=/data

WORKDIR /app
COPY pyproject.toml README.md ./
COPY rca ./rca
COPY workers ./workers
# The Alembic scripts ship inside the package as `rca_migrations` (see pyproject.toml).
COPY migrations ./migrations
# The LLM prompt templates ship as `rca_prompts` (see pyproject.toml).
COPY prompts ./prompts
RUN pip install . \
    && useradd --system --create-home --home-dir /home/rca rca \
    && mkdir -p /data && chown rca /data

USER rca
EXPOSE 8080
CMD ["rca", "serve"]
