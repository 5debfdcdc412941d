"""The only package that imports kubernetes_asyncio: a raw-JSON client and list+watch informers."""
