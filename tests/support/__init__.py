"""Libraries for the black-box tests (not tests themselves): the server launcher and raw
HTTP/1.x client (``helpers``), the one buffered socket reader every raw client builds on
(``wire``), misbehaving clients (``hostile``), raw WebSocket and HTTP/2 clients (``wsraw``,
``h2frames``, ``h2client``) and test certificates (``tls_certs``)."""
