#include "base/hmac.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

weft_status weft_sha256(const void *data, size_t n, unsigned char out[32])
{
    unsigned int len = 0;
    if (!EVP_Digest(data, n, out, &len, EVP_sha256(), NULL) || len != 32)
        return weft_error(WEFT_ERR_NOMEM, "sha256: libcrypto failed");
    return WEFT_OK;
}

weft_status weft_hmac_sha256(const void *key, size_t key_len, const void *a, size_t an, const void *b, size_t bn,
                             unsigned char out[32])
{
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0), OSSL_PARAM_END};
    size_t len = 0;
    int ok = ctx && EVP_MAC_init(ctx, key, key_len, params) && EVP_MAC_update(ctx, a, an) &&
             (!bn || EVP_MAC_update(ctx, b, bn)) && EVP_MAC_final(ctx, out, &len, 32) && len == 32;
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
    return ok ? WEFT_OK : weft_error(WEFT_ERR_NOMEM, "hmac-sha256: libcrypto failed");
}

int weft_digest_eq(const unsigned char a[32], const unsigned char b[32])
{
    unsigned char d = 0;
    for (int i = 0; i < 32; i++) d |= a[i] ^ b[i];
    return d == 0;
}
