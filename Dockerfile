# Turnstile's controller image: `docker build -t turnstile:dev .`
# Slim, non-root (uid 65532), nothing written outside /tmp (the Deployment mounts an emptyDir
# there and runs with readOnlyRootFilesystem).
#
# Reproducible: the base image is pinned by digest (python:3.11-slim-bookworm), and every Python
# dependency is installed from requirements.lock with its hashes (pip refuses anything else).
# To move to a newer base or newer dependencies (`make lock` rewrites the lock from pyproject.toml):
#   docker buildx imagetools inspect python:3.11-slim-bookworm   # the digest to put below
ARG BASE=python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91

FROM ${BASE} AS build
WORKDIR /src
COPY requirements.lock ./
RUN pip install --no-cache-dir --require-hashes --only-binary=:all: --target /deps -r requirements.lock
COPY pyproject.toml README.md ./
COPY queues queues
COPY admission admission
COPY migrations migrations
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${BASE}
RUN useradd --uid 65532 --user-group --no-create-home --shell /usr/sbin/nologin turnstile
COPY --from=build /deps /usr/local/lib/python3.11/site-packages
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-deps /wheels/*.whl && rm -rf /wheels \
    && python -c "import admission.cli.main, kubernetes_asyncio, asyncpg, sqlalchemy"
USER 65532:65532
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TURNSTILE_HOME=/tmp/turnstile
EXPOSE 9443 8080
ENTRYPOINT ["turnstile"]
CMD ["controller"]
