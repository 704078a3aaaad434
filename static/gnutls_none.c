// SPDX-License-Identifier: MIT
/*
 * What the static build (make STATIC=1) links instead of GnuTLS.
 *
 * Debian's libmicrohttpd.a is built with HTTPS, so it refers to GnuTLS, and a static GnuTLS
 * needs p11-kit, of which Debian ships no static archive (nor of libunistring, which libidn2
 * needs): GnuTLS cannot be linked statically from Debian's packages. tokenscope's metrics
 * listener serves plain HTTP (httpd.c starts the daemon without MHD_USE_TLS), so libmicrohttpd
 * calls none of these but gnutls_global_init and gnutls_global_deinit, at load and exit. The
 * functions below take their place: the global ones succeed doing nothing, and every other
 * one fails as a GnuTLS built without the feature would, so a TLS daemon could not start.
 * The declarations come from GnuTLS's own headers, so a changed signature does not build.
 */
#include <stdlib.h>

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>

#define NONE GNUTLS_E_UNIMPLEMENTED_FEATURE

gnutls_alloc_function gnutls_malloc = malloc;

int gnutls_global_init(void)
{
	return 0;
}

void gnutls_global_deinit(void)
{
}

const char *gnutls_strerror(int error)
{
	return error == NONE ? "TLS is not in a static tokenscope" : "GnuTLS error";
}

int gnutls_init(gnutls_session_t *session, unsigned int flags)
{
	return NONE;
}

void gnutls_deinit(gnutls_session_t session)
{
}

int gnutls_alpn_set_protocols(gnutls_session_t session, const gnutls_datum_t *protocols,
			      unsigned protocols_size, unsigned flags)
{
	return NONE;
}

int gnutls_bye(gnutls_session_t session, gnutls_close_request_t how)
{
	return NONE;
}

int gnutls_handshake(gnutls_session_t session)
{
	return NONE;
}

int gnutls_certificate_allocate_credentials(gnutls_certificate_credentials_t *res)
{
	return NONE;
}

void gnutls_certificate_free_credentials(gnutls_certificate_credentials_t sc)
{
}

void gnutls_certificate_server_set_request(gnutls_session_t session,
					   gnutls_certificate_request_t req)
{
}

void gnutls_certificate_set_dh_params(gnutls_certificate_credentials_t res,
				      gnutls_dh_params_t dh_params)
{
}

void gnutls_certificate_set_retrieve_function2(gnutls_certificate_credentials_t cred,
					       gnutls_certificate_retrieve_function2 *func)
{
}

void gnutls_certificate_set_retrieve_function3(gnutls_certificate_credentials_t cred,
					       gnutls_certificate_retrieve_function3 *func)
{
}

int gnutls_certificate_set_x509_key_mem(gnutls_certificate_credentials_t res,
					const gnutls_datum_t *cert, const gnutls_datum_t *key,
					gnutls_x509_crt_fmt_t type)
{
	return NONE;
}

int gnutls_certificate_set_x509_key_mem2(gnutls_certificate_credentials_t res,
					 const gnutls_datum_t *cert, const gnutls_datum_t *key,
					 gnutls_x509_crt_fmt_t type, const char *pass,
					 unsigned int flags)
{
	return NONE;
}

int gnutls_certificate_set_x509_trust_mem(gnutls_certificate_credentials_t res,
					  const gnutls_datum_t *ca, gnutls_x509_crt_fmt_t type)
{
	return NONE;
}

gnutls_cipher_algorithm_t gnutls_cipher_get(gnutls_session_t session)
{
	return GNUTLS_CIPHER_UNKNOWN;
}

int gnutls_credentials_set(gnutls_session_t session, gnutls_credentials_type_t type, void *cred)
{
	return NONE;
}

int gnutls_dh_params_init(gnutls_dh_params_t *dh_params)
{
	return NONE;
}

void gnutls_dh_params_deinit(gnutls_dh_params_t dh_params)
{
}

int gnutls_dh_params_import_pkcs3(gnutls_dh_params_t params, const gnutls_datum_t *pkcs3_params,
				  gnutls_x509_crt_fmt_t format)
{
	return NONE;
}

int gnutls_priority_init(gnutls_priority_t *priority_cache, const char *priorities,
			 const char **err_pos)
{
	return NONE;
}

void gnutls_priority_deinit(gnutls_priority_t priority_cache)
{
}

int gnutls_priority_set(gnutls_session_t session, gnutls_priority_t priority)
{
	return NONE;
}

gnutls_protocol_t gnutls_protocol_get_version(gnutls_session_t session)
{
	return GNUTLS_VERSION_UNKNOWN;
}

int gnutls_psk_allocate_server_credentials(gnutls_psk_server_credentials_t *sc)
{
	return NONE;
}

void gnutls_psk_free_server_credentials(gnutls_psk_server_credentials_t sc)
{
}

void gnutls_psk_set_server_credentials_function(gnutls_psk_server_credentials_t cred,
						gnutls_psk_server_credentials_function *func)
{
}

size_t gnutls_record_check_pending(gnutls_session_t session)
{
	return 0;
}

int gnutls_record_get_direction(gnutls_session_t session)
{
	return 0;
}

ssize_t gnutls_record_recv(gnutls_session_t session, void *data, size_t data_size)
{
	return NONE;
}

ssize_t gnutls_record_send(gnutls_session_t session, const void *data, size_t data_size)
{
	return NONE;
}

void *gnutls_session_get_ptr(gnutls_session_t session)
{
	return NULL;
}

void gnutls_session_set_ptr(gnutls_session_t session, void *ptr)
{
}

void gnutls_transport_set_int2(gnutls_session_t session, int r, int s)
{
}
