# Turnstile's controller image: `docker build -t turnstile:dev .`
# Slim, non-root (uid 65532), nothing written outside /tmp (the Deployment mounts an emptyDir
# there and runs with readOnlyRootFilesystem).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY queues queues
COPY admission admission
COPY migrations migrations
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --uid 65532 --user-group --no-create-home --shell /usr/sbin/nologin turnstile
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 65532:65532
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TURNSTILE_HOME=/tmp/turnstile
EXPOSE 9443 8080
ENTRYPOINT ["turnstile"]
CMD ["controller"]
