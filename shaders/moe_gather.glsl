/* MATMUL_ID's slot gathering (mul_mat_vec_id.comp, mul_mm_id.comp): a
 * workgroup serves one expert e and collects, in slot order, the slots
 * (r * k + j) whose id ids[r][j] is e, GATHER_CAP at a time. The ids are the
 * step's (MOE_ROUTE wrote them on the device); each pass reads GATHER_WG of
 * them, one per thread, and thread 0 appends the matches. An expert no slot
 * chose gets 0 at once, after one read of the ids: its weights are never
 * touched.
 *
 * The including shader defines GATHER_WG (its threads), GATHER_CAP and
 * MOE_ID(i) (the id of slot i, as a uint: a negative id matches nothing),
 * all uniform; gather_slots is called in uniform control flow (it has
 * barriers). g_list[0 .. n) holds the slots until the next call. */
#ifndef WEFT_MOE_GATHER_GLSL
#define WEFT_MOE_GATHER_GLSL

shared uint g_list[GATHER_CAP];
shared uint g_flag[GATHER_WG];
shared uint g_n, g_cursor;

/* The next at most GATHER_CAP slots from `cursor` on that chose expert e
 * (into g_list; cursor moves past them); their count, 0 when none is left. */
uint gather_slots(uint e, inout uint cursor, uint n_slots)
{
    const uint tid = gl_LocalInvocationID.x;
    uint n = 0u;
    while (cursor < n_slots) {
        const uint i = cursor + tid;
        g_flag[tid] = i < n_slots && MOE_ID(i) == e ? 1u : 0u;
        barrier();
        if (tid == 0u) {
            uint c = cursor;
            for (uint j = 0u; j < GATHER_WG && c < n_slots; j++) {
                if (g_flag[j] != 0u) {
                    if (n == GATHER_CAP) break;  /* full: slot c waits for the next call */
                    g_list[n++] = c;
                }
                c++;
            }
            g_n = n;
            g_cursor = c;
        }
        barrier();
        n = g_n;
        cursor = g_cursor;
        if (n == GATHER_CAP) break;
    }
    return n;
}

#endif
