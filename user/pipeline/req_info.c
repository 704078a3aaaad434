// SPDX-License-Identifier: MIT
#include <string.h>

#include "pipeline/req_info.h"

void reqbody_info_init(struct req_info *out)
{
	memset(out, 0, sizeof(*out));
	out->stream = -1;
	out->max_tokens = -1;
	out->disagg.do_remote_prefill = out->disagg.do_remote_decode = -1;
	out->disagg.remote_port = out->disagg.bootstrap_port = -1;
}

bool reqbody_has_disagg(const struct req_disagg *d)
{
	return d->kv || d->room_set || d->bootstrap_host[0] || d->bootstrap_port >= 0;
}
