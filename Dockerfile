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
# The Alembic scripts are found next to the `rca` package (rca/store/db.py: MIGRATIONS_DIR), so
# the project is installed in place (editable) rather than copied into site-packages.
COPY migrations ./migrations
RUN pip install -e . \
    && useradd --system --create-home --home-dir /home/rca rca \
    && mkdir -p /data && chown rca /data

USER rca
EXPOSE 8080
CMD ["rca", "serve"]
